import os
import sys

# ``python -m fedsim`` puts the current folder first on the import path; the ``fedsim`` command
# does not. Drop it (unless fedsim itself was found there), so a file in the current folder (a
# planted ``torch.py``, a ``*.dist-info``) is never imported or read in place of the real one, here
# or in ``compare`` workers; a ``--plugin`` module is looked up there explicitly (fedsim.plugins).
if sys.path and sys.path[0] in ("", os.getcwd()):
    _here = os.path.realpath(os.getcwd())
    if os.path.dirname(os.path.dirname(os.path.realpath(__file__))) != _here:
        del sys.path[0]

from .cli import main  # noqa: E402

sys.exit(main())
