"""Readers for the on-disk layouts the field publishes its federated datasets in.

Each reader returns a :class:`fedsim.data.federated.FederatedData` whose clients are read on
demand: opening a dataset costs an index (user -> where its examples are), not the examples.

- :mod:`.leaf` -- LEAF's JSON (``train/`` and ``test/`` folders, ``users``/``num_samples``/``user_data``).
- :mod:`.table` -- a Parquet/Arrow table with a client-id column (Flower's Hugging Face exports).
- :mod:`.pfl_hdf5` -- pfl-research's HDF5 (``examples/<user>/<feature>``).
- :mod:`.fedscale_csv` -- FedScale's ``client_data_mapping`` CSV next to the sample files.
- :mod:`.fedjax_sqlite` -- FedJAX's SQLite (``federated_data(client_id, data, num_examples)``).

Bad files raise :class:`DataFormatError` (one line ``FILE: problem``, exit 2); missing files raise
:class:`fedsim.data.errors.DataNotFound` naming the dataset, where to get it and the folder read.
"""

from fedsim.data.formats.errors import DataFormatError

__all__ = ["DataFormatError"]
