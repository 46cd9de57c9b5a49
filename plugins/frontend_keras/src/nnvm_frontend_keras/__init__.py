"""nnvm's Keras frontend: ``.keras`` (Keras 3) and legacy ``.h5`` files, and in-memory ``keras.Model``s,
read with h5py and json alone (``reader``), converted layer by layer (``convert_*``) over the shared
frontend layer ``nnvm.frontend`` (``importer``)."""
