"""The nnvm conformance suite: every standard operator against numpy and four models against
onnxruntime, on any installed target.

``nnvm conformance --target T`` (``nnvm_conformance.cli``) and ``pytest --nnvm-target T``
(``nnvm_conformance.plugin``, entry point ``pytest11``) run the same cases. Importing this package is
cheap: pytest imports the plugin in every session, so the heavy modules load only when used.
"""
