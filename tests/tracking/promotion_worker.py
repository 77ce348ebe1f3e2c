"""A process of the concurrent-promotion test (spawned; imports only recpipe.tracking)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from recpipe.tracking import PromotionRefused, promote, promotion_lock


def promote_then_hold_lock(uri: str, model: str, version: int, barrier: Any, out: str) -> None:
    """Promote ``version`` at the same moment as the other process, then (second round) hold the
    promotion lock for a while and record when."""
    result: dict[str, Any] = {"version": version}
    barrier.wait(timeout=120)
    try:
        result["promotion"] = promote(uri, model, version, actor=f"worker-{version}").to_dict()
    except PromotionRefused as err:
        result["refused"] = err.reasons
    barrier.wait(timeout=120)
    with promotion_lock(uri, model, timeout_s=60):
        start = time.time()
        time.sleep(0.3)
        result["held"] = [start, time.time()]
    Path(out).write_text(json.dumps(result))
