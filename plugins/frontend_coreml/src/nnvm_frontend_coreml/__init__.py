"""CoreML frontend for nnvm."""
