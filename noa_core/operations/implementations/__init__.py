"""What the built-in operations do: one module per operation (``noa_core.operations.NAME``'s plan, plans, report,
edit, show and query answers, with their helpers), importing NumPy and the domain modules at the top.

The declarations (``noa_core/operations/NAME.py``) name these functions by
:class:`~noa_core.operations.spec.Implementation` references, so a module here is imported only when its
operation runs: ``noa --help`` and the doors' surfaces load none of them.
"""
