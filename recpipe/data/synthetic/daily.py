"""Synthetic data with time: ``days`` of rows in which ads are born and retire, popularity shifts and
users' interests drift, so that a model frozen on one day decays on the next ones.

Taobao (:class:`TaobaoTimeline`): the catalogue's ads are the ads alive on day 0 (each already some way
into its life); every later day ``len(ads) / AD_LIFE_DAYS`` new ads are born, each a new id in an
existing campaign, brand and category (a random ad's), with a price, click and conversion effects of its
own. An ad lives ``1 + Exponential(AD_LIFE_DAYS)`` days (rounded down), shown with its Zipf popularity weight times
``exp(trajectory)``, where its effect on the click logit moves over its life along

    trajectory(day) = trend * (2 * (day - birth + 0.5) / life - 1)        (trend ~ N(0, TREND_SD))

so an ad rises or fades. Each day every one of a user's three favourite categories (which the user's
history and the targeted ads come from) moves with probability :data:`INTEREST_DRIFT` to the category of
a popular ad of that day. Criteo (:class:`CriteoTimeline`): every categorical column with at least
:data:`CRITEO_DRIFT_MIN_VALUES` values slides its popularity ranking by ``CRITEO_SHIFT`` of its values a
day (value ``(rank + day * shift) % values``): values rise from the tail into the head (born), the head's
slide on and the hottest wrap into the tail (retire). The click model is otherwise today's, so
``true_prob`` stays the oracle of every day (:func:`daily_oracle_auc`).

Day ``d``'s rows come from random streams of ``(seed, d, chunk)`` and the state of days ``0..d``, so they
do not depend on how many days follow: 7 days are the first 7 of 14 (with the same rows per day).
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa

import recpipe.data.synthetic.criteo as criteo
import recpipe.data.synthetic.taobao as taobao
from recpipe.auc import binary_auc
from recpipe.data.synthetic.common import WeightedSampler, zipf_weights

DEFAULT_START = 20260101
MAX_DAYS = 3660
SECONDS_PER_DAY = 86_400
AD_LIFE_DAYS = 10.0  # mean life of an ad, in days
TREND_SD = 0.6  # how far an ad's click effect moves over its life (either way)
INTEREST_DRIFT = 0.15  # chance per day that one of a user's favourite categories moves
CRITEO_SHIFT = 0.002  # share of a column's values its popularity ranking slides by per day
CRITEO_DRIFT_MIN_VALUES = 1000  # smaller columns (devices, sites' types...) keep their ranking
# Random streams of their own (after every stream the static generators use): a day's rows, the ads
# born on a day, the day's interest drift, the day's clock.
_ROWS, _BIRTHS, _DRIFT, _CLOCK = ((1 << 41) + k for k in range(4))
_ID_STEP = 1_000_003  # a prime above the number of adgroup ids, so i -> i * step % ids is a bijection


def day_dates(days: int, start: int | str = DEFAULT_START) -> list[str]:
    """The ``YYYYMMDD`` dates of ``days`` consecutive days from ``start``.

    Example::

        >>> day_dates(3, 20261231)
        ['20261231', '20270101', '20270102']
    """
    if not 1 <= days <= MAX_DAYS:
        raise ValueError(f"synthetic data: days must be in [1, {MAX_DAYS}], got {days}")
    try:
        first = datetime.strptime(str(start), "%Y%m%d")
    except ValueError:
        raise ValueError(f"synthetic data: start must be a date YYYYMMDD, got {start!r}") from None
    return [(first + timedelta(days=d)).strftime("%Y%m%d") for d in range(days)]


def day_start_seconds(dt: str) -> int:
    """Unix seconds of ``dt``'s (``YYYYMMDD``) midnight, UTC."""
    return int(datetime.strptime(dt, "%Y%m%d").replace(tzinfo=UTC).timestamp())


def daily_oracle_auc(
    table: pa.Table, label: str | None = None, prob: str = "true_prob", dt: str = "dt"
) -> dict[str, float]:
    """Each day's AUC of the true click probability: the ceiling a model can reach on that day.

    Args:
        table (pa.Table): rows with the day column (a string ``YYYYMMDD`` or, read back through pyarrow's
            hive partitioning, an integer), the label and the true probability.
        label (str | None): the label column (default ``clk`` when present, else ``label``).
        prob (str): the true probability column.
        dt (str): the day column.

    Returns:
        dict[str, float]: ``YYYYMMDD`` → oracle AUC, by date.

    Example::

        table = pyarrow.dataset.dataset("runs/days", partitioning="hive").to_table()
        daily_oracle_auc(table)   # {"20260101": 0.741, "20260102": 0.743, ...}
    """
    label = label or ("clk" if "clk" in table.column_names else "label")
    for name in (dt, label, prob):
        if name not in table.column_names:
            raise ValueError(f"daily_oracle_auc: the table has no column {name!r} ({table.column_names})")
    days = np.asarray(table.column(dt).cast(pa.string()).to_numpy(zero_copy_only=False))
    labels = table.column(label).to_numpy()
    probs = table.column(prob).to_numpy()
    return {str(d): binary_auc(labels[days == d], probs[days == d]) for d in np.unique(days)}


class TaobaoTimeline:
    """The ads, lives and interests of every day of one seed's Taobao catalogue (see the module docstring).

    Args:
        cat (taobao.TaobaoCatalogue): the catalogue (its ads: those alive on day 0).
        seed (int): the random seed (the catalogue's).
        dates (list[str]): the days' ``YYYYMMDD`` dates.

    Example::

        timeline = TaobaoTimeline(taobao.build_catalogue(0, 20_000), 0, day_dates(14))
        table, labels, probs = timeline.make_chunk((3, 0), 20_000)   # day 4's first 20k rows
    """

    def __init__(self, cat: taobao.TaobaoCatalogue, seed: int, dates: list[str]) -> None:
        self.seed, self.dates = seed, dates
        n0 = cat.ad_id.size
        per_day = max(1, round(n0 / AD_LIFE_DAYS))  # as many born as retire, about
        rng = np.random.default_rng([seed, taobao._TAG, _BIRTHS, 0])
        # The ads live on day 0 are caught mid-life: their lives are length-biased (Gamma(2) for an
        # exponential life), so the days they have left are again Exponential(AD_LIFE_DAYS).
        life = 1 + np.floor(rng.gamma(2.0, AD_LIFE_DAYS, n0)).astype(np.int64)
        birth = -np.floor(rng.random(n0) * life).astype(np.int64)  # each is alive on day 0
        blocks = {
            "birth": [birth],
            "life": [life],
            "trend": [rng.normal(0.0, TREND_SD, n0)],
            "pop": [zipf_weights(np.arange(n0), taobao.AD_POP_EXPONENT)],
        }
        born = len(dates) - 1
        new_ids = _new_ad_ids(cat.ad_id, per_day * born, np.uint64(rng.integers(0, 1 << 32)))
        columns = {k: [getattr(cat, k)] for k in ("ad_cate", "ad_brand", "ad_campaign", "ad_customer")}
        numbers = {k: [getattr(cat, k)] for k in ("ad_price", "ad_effect", "ad_cvr_effect")}
        for day in range(1, len(dates)):
            rng = np.random.default_rng([seed, taobao._TAG, _BIRTHS, day])
            like = cat.ad_pop.sample(rng, per_day)  # a new ad joins a live ad's campaign, brand, category
            for k, parts in columns.items():
                parts.append(getattr(cat, k)[like])
            numbers["ad_price"].append(
                np.clip(np.round(rng.lognormal(np.log(80.0), 1.3, per_day), 2), 0.01, 99_999.0)
            )
            numbers["ad_effect"].append(rng.normal(0.0, 0.5, per_day))
            numbers["ad_cvr_effect"].append(rng.normal(0.0, 0.7, per_day))
            blocks["birth"].append(np.full(per_day, day, dtype=np.int64))
            blocks["life"].append(_lives(rng, per_day))
            blocks["trend"].append(rng.normal(0.0, TREND_SD, per_day))
            # A popularity weight of a random rank of the day-0 Zipf law.
            rank = np.floor(rng.random(per_day) * n0)
            blocks["pop"].append(zipf_weights(rank, taobao.AD_POP_EXPONENT))
        ad_id = np.concatenate([cat.ad_id, new_ids])
        ad_cate = np.concatenate(columns["ad_cate"])
        ad_brand = np.concatenate(columns["ad_brand"])
        self.cat = dataclasses.replace(
            cat,
            ad_id=ad_id,
            **{k: np.concatenate(v) for k, v in columns.items()},
            **{k: np.concatenate(v) for k, v in numbers.items()},
            ad_item=taobao.ad_items(ad_id, cat.cate_id[ad_cate], cat.brand_id, ad_brand),
        )
        self.birth, self.life, self.trend, self.pop = (np.concatenate(blocks[k]) for k in blocks)
        self._day, self._favs = -1, cat.user_fav_cates
        self._view: taobao.TaobaoCatalogue | None = None

    def day(self, day: int) -> taobao.TaobaoCatalogue:
        """The catalogue as day ``day`` (0-based) shows it: its live ads, their effects and popularity, the
        users' favourite categories of that day."""
        if not 0 <= day < len(self.dates):
            raise ValueError(f"day {day} is outside the {len(self.dates)} days generated")
        if day < self._day:  # interests are a chain over days: replay from day 0
            self._day, self._favs = -1, self.cat.user_fav_cates
        while self._day < day:
            self._day += 1
            self._view = self._advance(self._day)
        assert self._view is not None
        return self._view

    def _advance(self, day: int) -> taobao.TaobaoCatalogue:
        cat = self.cat
        alive = (self.birth <= day) & (day < self.birth + self.life)
        trajectory = self.trend * (2.0 * (day - self.birth + 0.5) / self.life - 1.0)
        ad_pop = WeightedSampler(np.where(alive, self.pop * np.exp(trajectory), 0.0))
        live = np.flatnonzero(alive)
        cate_ads = live[np.argsort(cat.ad_cate[live], kind="stable")]
        cate_count = np.bincount(cat.ad_cate[live], minlength=cat.cate_id.size)
        cate_start = np.concatenate(([0], np.cumsum(cate_count)[:-1]))
        favs = self._favs
        if day > 0:
            rng = np.random.default_rng([self.seed, taobao._TAG, _DRIFT, day])
            # A favourite whose category has no live ad left moves too, so targeted ads always exist.
            move = (rng.random(favs.shape) < INTEREST_DRIFT) | (cate_count[favs] == 0)
            favs = np.where(move, cat.ad_cate[ad_pop.sample(rng, favs.size)].reshape(favs.shape), favs)
        self._favs = favs
        return dataclasses.replace(
            cat,
            ad_pop=ad_pop,
            ad_effect=cat.ad_effect + np.where(alive, trajectory, 0.0),
            cate_ads=cate_ads,
            cate_start=cate_start,
            cate_count=cate_count,
            user_fav_cates=favs,
        )

    def make_chunk(self, key: tuple[int, int], n: int) -> tuple[pa.Table, np.ndarray, np.ndarray]:
        """Rows of chunk ``key = (day, chunk)``: :func:`taobao.make_chunk`'s, their ``time_stamp`` in the day."""
        day, chunk = key
        table, labels, probs = taobao.make_chunk(self.day(day), self.seed, (_ROWS, day, chunk), n)
        return (
            _in_day(table, self.dates[day], (table.column("time_stamp").to_numpy() - taobao.FIRST_DAY)),
            labels,
            probs,
        )


class CriteoTimeline:
    """Criteo rows whose large columns' popularity rankings slide day by day (see the module docstring).

    Args:
        model (criteo.CriteoModel): the click model.
        seed (int): the random seed (the model's).
        dates (list[str]): the days' ``YYYYMMDD`` dates.
        hashed (bool): TorchEasyRec's column layout (:func:`criteo.make_chunk`).
    """

    def __init__(self, model: criteo.CriteoModel, seed: int, dates: list[str], hashed: bool = False) -> None:
        self.model, self.seed, self.dates, self.hashed = model, seed, dates, hashed

    def day(self, day: int) -> criteo.CriteoModel:
        """The model as day ``day`` (0-based) draws values: each large column's ranking slid by ``day`` steps."""
        samplers = []
        for effects, sampler in zip(self.model.cat_effect, self.model.samplers):
            values = effects.size
            step = int(np.ceil(values * CRITEO_SHIFT)) if values >= CRITEO_DRIFT_MIN_VALUES else 0
            samplers.append(_SlidSampler(sampler, day * step % values, values))
        return dataclasses.replace(self.model, samplers=samplers)

    def make_chunk(self, key: tuple[int, int], n: int) -> tuple[pa.Table, np.ndarray, np.ndarray]:
        """Rows of chunk ``key = (day, chunk)`` with a ``time_stamp`` column (unix seconds in the day)."""
        day, chunk = key
        table, labels, probs = criteo.make_chunk(
            self.day(day), self.seed, (_ROWS, day, chunk), n, self.hashed
        )
        clock = np.random.default_rng([self.seed, criteo._TAG, _CLOCK, day, chunk]).integers(
            0, SECONDS_PER_DAY, n
        )
        return _in_day(table, self.dates[day], clock), labels, probs


class _SlidSampler:
    """A sampler whose index ``i`` shows value ``(i + shift) % values``."""

    def __init__(self, inner: WeightedSampler, shift: int, values: int) -> None:
        self.inner, self.shift, self.values = inner, shift, values

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        idx = self.inner.sample(rng, size)
        return idx if self.shift == 0 else (idx + self.shift) % self.values


def _lives(rng: np.random.Generator, n: int) -> np.ndarray:
    return 1 + np.floor(rng.exponential(AD_LIFE_DAYS, n)).astype(np.int64)


def _new_ad_ids(taken: np.ndarray, n: int, salt: np.uint64) -> np.ndarray:
    """``n`` adgroup ids outside ``taken``, the first ``k`` the same whatever ``n`` (a fixed sequence)."""
    ids = np.uint64(taobao.NUM_BUCKETS["adgroup_id"] - 1)
    if n > int(ids) - taken.size:
        raise ValueError(
            f"synthetic taobao: {n} ads born over the days do not fit the {int(ids)} adgroup ids; "
            "use fewer days or ads"
        )
    candidates = 1 + (np.arange(n + taken.size, dtype=np.uint64) * np.uint64(_ID_STEP) + salt) % ids
    return candidates[~np.isin(candidates, taken)][:n].astype(np.int64)


def _in_day(table: pa.Table, dt: str, seconds: np.ndarray) -> pa.Table:
    """``table`` with ``time_stamp`` set to ``seconds`` (taken modulo a day) after ``dt``'s midnight."""
    stamp = pa.array(day_start_seconds(dt) + np.asarray(seconds, dtype=np.int64) % SECONDS_PER_DAY)
    i = table.schema.get_field_index("time_stamp")
    if i < 0:
        return table.append_column("time_stamp", stamp)
    return table.set_column(i, "time_stamp", stamp)


__all__ = [
    "CriteoTimeline",
    "TaobaoTimeline",
    "daily_oracle_auc",
    "day_dates",
    "day_start_seconds",
]
