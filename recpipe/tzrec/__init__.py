"""Import TorchEasyRec (``tzrec``) pipeline configs as recpipe configs.

``recpipe config import-tzrec IN.config -o OUT.yaml`` is the command; :func:`import_tzrec_file` the
library call. See :mod:`recpipe.tzrec.importer` for what maps to what.
"""

from recpipe.tzrec.importer import FROM_DEFAULTS, TzrecImport, import_tzrec, import_tzrec_file
from recpipe.tzrec.problems import Problem, TzrecImportError

__all__ = ["FROM_DEFAULTS", "Problem", "TzrecImport", "TzrecImportError", "import_tzrec", "import_tzrec_file"]
