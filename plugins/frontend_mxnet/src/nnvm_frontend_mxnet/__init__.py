"""MXNet frontend for nnvm: reads ``-symbol.json`` and ``.params`` files without importing mxnet.

MXNet 1.9.1, the last release, needs numpy < 1.24, so a user's model must be readable beside a modern
numpy: ``params`` reads the NDArray-list format and ``symbol`` the symbol JSON, both in pure Python.
"""
