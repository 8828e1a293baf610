"""The bounds fedsim puts on its input (docs/reliability.md lists them; a test keeps both equal).

Every number a scenario or the command line gives is checked against these where it is read, so
that what passes validation can run: no int64 overflow, no list of 10**12 per-step values, no
YAML document that expands without bound.
"""

from __future__ import annotations

__all__ = [
    "MAX_SCENARIO_BYTES", "MAX_YAML_DEPTH", "MAX_YAML_NODES", "MAX_INT_LITERAL", "MAX_NAME_LENGTH", "MAX_INT",
    "MAX_SEED", "MAX_ROUNDS", "MAX_CLIENTS", "MIN_SPEED", "MAX_SPEED", "MIN_SLOWDOWN", "MAX_SLOWDOWN",
    "MAX_SIGMA", "MAX_SECONDS", "MAX_STEPS_PER_JOB", "MAX_EPOCHS", "MAX_SEEDS", "MAX_COMPARE_RUNS", "MAX_EVAL_ROWS",
    "MIN_DIURNAL_PERIOD", "MIN_DIURNAL_LEVEL", "MAX_TRACE_BYTES", "MAX_TRACE_ROWS", "MAX_PART_ROWS", "MAX_DPI",
    "MAX_CORE_WAIT_S", "MAX_LEAF_FILE_BYTES", "MAX_JSON_VALUE_BYTES", "MAX_JSON_VALUE_COST", "MAX_JSON_DEPTH", "MAX_MAPPING_BYTES",
    "MAX_DATA_ROWS", "MAX_LINE_BYTES", "MAX_SAMPLE_BYTES", "MAX_IMAGE_PIXELS", "MAX_DECODED_BYTES",
    "MAX_TEST_BYTES", "MAX_PAYLOAD_BYTES",
    "MAX_MODEL_PARAMETERS", "MAX_MODEL_WIDTH", "MAX_MODEL_LAYERS", "MAX_EVAL_BYTES",
]

#: Largest scenario file read (bytes).
MAX_SCENARIO_BYTES = 16 * 2**20
#: Deepest nesting of YAML collections (and of dotted ``--set`` keys).
MAX_YAML_DEPTH = 32
#: Most YAML nodes a document may hold once every alias is expanded (alias bombs stop here).
MAX_YAML_NODES = 1_000_000
#: Longest integer literal in YAML (characters): longer ones are refused before conversion, which
#: is quadratic for YAML 1.1's base-60 integers (``1:00:00:...``).
MAX_INT_LITERAL = 100
#: Longest ``name`` or variant name (characters).
MAX_NAME_LENGTH = 100
#: Largest integer anywhere in a scenario (int64).
MAX_INT = 2**63 - 1
#: Seeds (``seed``, ``data.seed``, ``compare --seeds``) lie in [0, MAX_SEED].
MAX_SEED = 2**63 - 1
#: Most rounds (also the largest ``eval.every`` and ``checkpoint.every``).
MAX_ROUNDS = 10**7
#: Most clients (``data.clients``, number of centers).
MAX_CLIENTS = 10**6
#: Speeds (local steps per simulated second), every value a speed can take.
MIN_SPEED = 1e-6
MAX_SPEED = 1e6
#: Slowdown factors (multiplying step time), every value a slowdown can take.
MIN_SLOWDOWN = 1e-6
MAX_SLOWDOWN = 1e6
#: Largest ``sigma`` of a lognormal speed or slowdown.
MAX_SIGMA = 10.0
#: Longest time in seconds: window, deadline, latency, Markov means, offline interval ends.
MAX_SECONDS = 1e9
#: Most local steps one client may be given in one job (prescribed, capped, or fitting a window).
MAX_STEPS_PER_JOB = 10**7
#: Most local epochs per job.
MAX_EPOCHS = 10**4
#: Most bytes of one transfer: `system.payload_bytes`, and a compressor's declared payload.
MAX_PAYLOAD_BYTES = 10**15
#: Most seeds one ``compare`` may run.
MAX_SEEDS = 10_000
#: Most runs (cells x seeds) one ``compare`` may plan; counted before any cell is built.
MAX_COMPARE_RUNS = 10_000
#: Most grid times of ``eval.every_seconds`` in one run (rows of evals.csv): checked at validation
#: where the run's length is known (``policy: window``: rounds x window), else when the run reaches it.
MAX_EVAL_ROWS = 10**6
#: Shortest diurnal ``period`` (seconds).
MIN_DIURNAL_PERIOD = 1e-3
#: Smallest diurnal ``peak`` and ``1 - trough`` (unless ``trough`` is 1: always online). The
#: thinning that draws diurnal toggles needs about 1 / this many candidates per toggle at worst.
MIN_DIURNAL_LEVEL = 1e-3
#: Largest trace file read: a trace CSV (``system.trace``) or a FedScale pickle (bytes, 1 GiB).
MAX_TRACE_BYTES = 2**30
#: Most data rows of a trace CSV, read or written (``fedsim trace``).
MAX_TRACE_ROWS = 10**7
#: Most rows one Parquet part may declare (fedsim writes at most 131,072 plus one round's clients).
MAX_PART_ROWS = 2**24
#: Largest ``fedsim plot --dpi``.
MAX_DPI = 600
#: Longest wait (seconds) for a shared core slot before a run stops taking turns (info.yaml says so).
MAX_CORE_WAIT_S = 600.0

# --------------------------------------------------------------------------- dataset files (fedsim/data/formats)
#: Largest LEAF JSON file (bytes, 4 GiB). Files are scanned through a memory map, so this bounds
#: the time of opening a folder, not its memory.
MAX_LEAF_FILE_BYTES = 2**32
#: Largest JSON value parsed at once (bytes, 64 MiB): a LEAF file's ``users`` or ``num_samples``
#: list, or one user's ``{"x": ..., "y": ...}``.
MAX_JSON_VALUE_BYTES = 64 * 2**20
#: Most memory one JSON value may take once parsed (bytes, 256 MiB), estimated from its text before
#: it is parsed (``fedsim.data.formats.leaf.parsed_cost``): its bytes plus 96 per element (``,``
#: ``[`` ``:``) and 192 more per object (``{``), at least what CPython's objects cost (a
#: one-character string 58 to 88 bytes with its pointer, a float 32, an empty list 64, a one-key
#: dict 192). A 60 MiB ``users`` list of one-letter names is 15.7 million strings, about 1 GiB parsed.
MAX_JSON_VALUE_COST = 256 * 2**20
#: Deepest nesting of JSON arrays and objects in a LEAF file (LEAF's own files nest 4 deep).
MAX_JSON_DEPTH = 32
#: Largest FedScale ``client_data_mapping`` CSV (bytes, 1 GiB).
MAX_MAPPING_BYTES = 2**30
#: Most examples (rows) of a FedScale mapping CSV or a Parquet/Arrow table.
MAX_DATA_ROWS = 10**7
#: Longest line of a FedScale mapping CSV (bytes).
MAX_LINE_BYTES = 2**16
#: Largest sample file a FedScale mapping names (an image; bytes, 64 MiB).
MAX_SAMPLE_BYTES = 64 * 2**20
#: Most pixels of one decoded image (width x height; 4096 x 4096), checked from its header before
#: it is decoded.
MAX_IMAGE_PIXELS = 2**24
#: Most bytes one read may decode to (512 MiB), checked before decoding from what the file
#: declares: one client's arrays (images, HDF5 datasets, a SQLite blob once decompressed), one
#: Parquet row group or column chunk, one compressed Arrow record batch.
MAX_DECODED_BYTES = 2**29
#: Most bytes a shared test set (pooled from a test file's clients or rows) may hold (4 GiB).
MAX_TEST_BYTES = 2**32

#: Most parameters of a model: a built-in model is counted on torch's meta device before anything
#: is allocated, a model from a registered or Python factory once built (before the run folder).
MAX_MODEL_PARAMETERS = 10**9
#: Largest width option of a built-in model (``mlp`` ``hidden`` and ``model.hidden``, ``leaf_cnn``
#: ``dense``, ``char_lstm`` ``vocab``, ``embed``, ``units``).
MAX_MODEL_WIDTH = 2**14
#: Most layers of a built-in model (``char_lstm`` ``layers``).
MAX_MODEL_LAYERS = 64
#: Largest ``evals.csv`` a resumed run reads (bytes; MAX_EVAL_ROWS rows of five numbers fit in
#: about 110 MB).
MAX_EVAL_BYTES = 2**28
