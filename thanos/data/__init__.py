"""Data and stores: calibration windows, local text corpora, zarr stores, safetensors reading.

- ``calibration``: ``nsamples`` windows of ``seqlen`` tokens from C4 or local files;
- ``textdata``: plain text, jsonl and parquet corpora;
- ``storage``: the checksummed zarr stores of tokens, block activations and block Hessians;
- ``safetensors_io``: reading ``.safetensors`` files with errors that name the file.

Imports: ``thanos.files`` and ``thanos.errors``. This ``__init__`` imports nothing.
"""
