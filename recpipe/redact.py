"""``redact(text)``: credentials in URIs replaced by ``***`` before anything is printed or logged.

One function for every place a data source or an error about one reaches a person or a store: MLflow
params and tags (:mod:`recpipe.tracking.runs`), the run summary, parameter errors. Standard library only.

Example::

    redact("s3://AKIA123:s3cr3t@bucket/data/part-0.parquet")   # 's3://***@bucket/data/part-0.parquet'
    redact("odps://proj/tables/t?access_key=k&x=1")             # 'odps://proj/tables/t?access_key=***&x=1'
"""

from __future__ import annotations

import re

# scheme://user:password@host → scheme://***@host (the user name alone can be an access key id)
_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.\-]*://)(?P<userinfo>[^/@\s'\"]+)@")
# ?access_key=…&token=… in a query string
_QUERY_SECRET = re.compile(
    r"(?P<key>[?&;](?:[a-z_]*(?:key|secret|token|password|passwd|pwd|signature|credential)[a-z_]*))=(?P<value>[^&;#\s'\"]+)",
    re.IGNORECASE,
)


def redact(text: str) -> str:
    """``text`` with the user-info part of every URI and secret-looking query values replaced by ``***``.

    Args:
        text (str): anything that may hold a URI: a data source, an error message, a command line.
    """
    if not text:
        return text
    text = _USERINFO.sub(lambda m: f"{m['scheme']}***@", text)
    return _QUERY_SECRET.sub(lambda m: f"{m['key']}=***", text)
