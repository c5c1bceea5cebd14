"""A tabular example: a CSV made by make_table.py, trained by model.TabularNet through snakeddp."""
