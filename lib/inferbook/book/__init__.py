"""The book's own helpers: gluing computed numbers into prose, data files, Colab notebooks.

    present.py         `glue` and the number formats every chapter uses
    listing.py         `show_source`: the library's code shown in a chapter, highlighted
    claims.py          `expect_measured`: claims about a measurement, strict in the build
    bookdata.py        finding and reading the data files under book/data (locally or on Colab)
    notebooks.py       generating the Colab twins of the chapters and exercises
    colab_markdown.py  MyST rewritten as the Markdown Colab renders (for the twins)
    citations.py       author–year citations from book/references.bib
    prose.py           a twin's prose cells: text shown with the values this kernel glued
"""
