"""The book's own helpers: gluing computed numbers into prose, data files, Colab notebooks.

    present.py         `glue` and the number formats every chapter uses
    listing.py         `show_source`: the library's code shown in a chapter, highlighted
    claims.py          `expect_measured`: claims about a measurement, strict in the build
    bookdata.py        finding and reading the data files under book/data (locally or on Colab)
    notebooks.py       generating the Colab twins of the chapters and exercises
    reader.py          the book's reader of .py sources (Sphinx, nbval, the execution cache)
    exercise_sources.py  an exercise source's solutions: student notebook, book page
    colab_markdown.py  MyST rewritten as the Markdown Colab renders (for the twins)
    citations.py       author–year citations from book/references.bib
    prose.py           a twin's prose cells: text shown with the values this kernel glued

The two editions (English and Chinese) from one set of sources:

    language.py        the book's languages and this kernel's (INFERBOOK_LANGUAGE)
    bilingual.py       a source's prose in two languages (cells tagged lang-zh), one selected
    chinese_numbers.py glued values in Chinese form (万, 亿) — the same numbers
    figures.py         `glue_figure`: a figure drawn and glued once per language
    editions.py        each edition's Jupyter Book configuration (_config.zh.yml overlay)
    sphinx_editions.py the Sphinx extension: Markdown pages' language, links between twins
"""
