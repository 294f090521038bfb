"""Print the README's table of operations: ``python -m noa_core.operations``."""

from noa_core.operations import markdown_table

print(markdown_table(), end="")
