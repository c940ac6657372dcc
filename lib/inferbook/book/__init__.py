"""The book's own helpers: gluing computed numbers into prose, data files, Colab notebooks.

    present.py    `glue` and the number formats every chapter uses
    bookdata.py   finding and reading the data files under book/data (locally or on Colab)
    notebooks.py  generating the Colab twins of the chapters and exercises
"""
