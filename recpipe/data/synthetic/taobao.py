"""Synthetic Taobao display-ad data: one wide table (impressions joined with user profiles and ad
features, plus the click history ``click_50_seq``) with a known click model.

The catalogue (users with profiles and category tastes, ads with category / brand / campaign /
customer / price, and every id's fixed effect) is drawn once per seed; rows then sample users and
ads with Zipf popularity. The true click logit is

    base + user effect + ad effect + category effect + small profile effects
         + 1.2 * recency(candidate cate_id in history) + 0.8 * recency(candidate brand in history)

where ``recency = 0.93 ** position`` of the most recent match (0 when none): the last two terms are
seen only by attending over the history with the candidate, which is what DIN's target attention does.
``base`` is calibrated so about 5% of rows are clicks.

A second label, ``buy`` (TorchEasyRec's ``taobao_multitask_sample`` has ``clk`` and ``buy``), is drawn only
for clicked rows, with the conversion logit

    cvr_base + 0.7 * user buying effect + 0.7 * ad conversion effect - 0.3 * price_z
             + 0.15 * (shopping_level - 2) + 0.8 * recency(candidate cate_id in history)

so ``P(buy) = P(click) * P(buy | click)``: rarer (``cvr_base`` is calibrated to 12% of clicks, ~0.6% of
rows), sharing the category-history signal and the ids with the click model, with effects of its own.
``true_buy_prob`` holds ``P(buy)``, the buy task's oracle. The conversion effects come from a random
stream of their own, so the click columns are the same with or without them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from recpipe.data.synthetic.common import ZipfSampler, calibrate_base, distinct_ids, sigmoid

NUM_BUCKETS = {
    "user_id": 1_141_730,
    "cms_segid": 98,
    "cms_group_id": 14,
    "final_gender_code": 3,
    "age_level": 8,
    "pvalue_level": 5,
    "shopping_level": 5,
    "occupation": 3,
    "new_user_class_level": 6,
    "adgroup_id": 846_812,
    "cate_id": 12_961,
    "campaign_id": 423_438,
    "customer": 255_877,
    "brand": 461_498,
}
PIDS = ("430548_1007", "430539_1007")
FIRST_DAY = 1_494_028_800  # 2017-05-06 00:00:00 UTC, the first day of the public dataset
DAYS = 8
MAX_HISTORY = 100
TARGET_POSITIVE_RATE = 0.05
TARGET_CVR = 0.12  # P(buy | click)
CATE_MATCH_EFFECT = 1.2
BRAND_MATCH_EFFECT = 0.8
RECENCY_DECAY = 0.93
AD_POP_EXPONENT = 0.8  # Zipf exponent of ad impressions
_TAG = 0x7A0BA0  # separates this generator's random streams from the Criteo one's


@dataclass
class TaobaoCatalogue:
    """Users, ads and their fixed effects for one seed (indices, not ids, inside; ids on output)."""

    user_id: np.ndarray
    user_profile: dict[str, np.ndarray]
    user_effect: np.ndarray
    user_fav_cates: np.ndarray  # (users, 3) category indices the user's history leans to
    user_pop: ZipfSampler
    ad_id: np.ndarray
    ad_cate: np.ndarray
    ad_brand: np.ndarray  # brand index, -1 when the brand is missing
    ad_campaign: np.ndarray
    ad_customer: np.ndarray
    ad_price: np.ndarray
    ad_effect: np.ndarray
    ad_pop: ZipfSampler
    cate_id: np.ndarray
    cate_effect: np.ndarray
    cate_gender: np.ndarray
    brand_id: np.ndarray
    campaign_id: np.ndarray
    customer_id: np.ndarray
    cate_ads: np.ndarray  # ad indices sorted by category
    cate_start: np.ndarray
    cate_count: np.ndarray
    ad_item: pa.Array  # "adgroup_id\x03cate_id\x03brand" per ad (brand empty when missing)
    user_buy_effect: np.ndarray  # the conversion model's own effects (see the module docstring)
    ad_cvr_effect: np.ndarray
    base: float = 0.0
    cvr_base: float = 0.0


def build_catalogue(
    seed: int, rows: int, users: int | None = None, ads: int | None = None
) -> TaobaoCatalogue:
    """Draw the catalogue for ``seed``, sized to ``rows`` so that ids repeat in small runs too.

    By default there is a user per 12 rows and an ad per 25 (the public dataset's density: 26M rows,
    1.14M users, 846k ads), so every user is seen ~12 times whatever ``rows`` is; ``users`` and ``ads``
    fix the catalogue instead (categories, brands, campaigns and customers follow the ads). A denser
    catalogue lets a model learn every id's effect from a few million rows (``benchmarks/quality.py``).

    Example::

        cat = build_catalogue(0, 1_000_000)   # 40k ads, 83k users, 1.6k categories
        cat = build_catalogue(0, 1_000_000, users=4_000, ads=2_000)   # each user seen ~250 times
    """
    for name, value, cap in (
        ("users", users, NUM_BUCKETS["user_id"]),
        ("ads", ads, NUM_BUCKETS["adgroup_id"]),
    ):
        if value is not None and not 1 <= value <= cap:
            raise ValueError(f"synthetic taobao: {name} must be in [1, {cap}], got {value}")
    rng = np.random.default_rng([seed, _TAG, 1 << 40])
    n_ads = ads if ads is not None else int(np.clip(rows // 25, 2_000, 200_000))
    n_users = users if users is not None else int(np.clip(rows // 12, 1_000, 1_000_000))
    n_cates = int(np.clip(n_ads // 25, 100, 12_000))
    n_brands = int(np.clip(n_ads // 2, 200, 460_000))
    n_campaigns = int(np.clip(n_ads * 2 // 3, 200, 420_000))
    n_customers = int(np.clip(n_campaigns // 2, 100, 255_000))

    cate_id = distinct_ids(rng, n_cates, NUM_BUCKETS["cate_id"])
    brand_id = distinct_ids(rng, n_brands, NUM_BUCKETS["brand"])
    campaign_id = distinct_ids(rng, n_campaigns, NUM_BUCKETS["campaign_id"])
    customer_id = distinct_ids(rng, n_customers, NUM_BUCKETS["customer"])
    # A brand sells in one category; an ad's category is its brand's (a fixed function of the ad).
    brand_cate = ZipfSampler(n_cates, 1.0).sample(rng, n_brands)
    ad_brand = ZipfSampler(n_brands, 0.9).sample(rng, n_ads)
    ad_cate = brand_cate[ad_brand]
    ad_brand = np.where(rng.random(n_ads) < 0.25, -1, ad_brand)  # ~25% of ads lack a brand, as in the data
    ad_campaign = rng.integers(0, n_campaigns, n_ads)
    campaign_customer = rng.integers(0, n_customers, n_campaigns)
    ad_price = np.clip(np.round(rng.lognormal(np.log(80.0), 1.3, n_ads), 2), 0.01, 99_999.0)
    ad_id = distinct_ids(rng, n_ads, NUM_BUCKETS["adgroup_id"])

    gender = rng.choice([1, 2], n_users, p=[0.35, 0.65])
    age = rng.choice(7, n_users, p=[0.02, 0.12, 0.26, 0.28, 0.18, 0.10, 0.04])
    segid = np.where(rng.random(n_users) < 0.7, 0, rng.integers(1, 98, n_users))
    profile = {
        "cms_segid": segid,
        "cms_group_id": (gender - 1) * 7 + age,
        "final_gender_code": gender,
        "age_level": age,
        "pvalue_level": rng.choice([1, 2, 3], n_users, p=[0.30, 0.55, 0.15]),
        "shopping_level": rng.choice([1, 2, 3], n_users, p=[0.05, 0.15, 0.80]),
        "occupation": (rng.random(n_users) < 0.06).astype(np.int64),
        "new_user_class_level": rng.choice([1, 2, 3, 4], n_users, p=[0.15, 0.35, 0.30, 0.20]),
    }
    ad_pop = ZipfSampler(n_ads, AD_POP_EXPONENT)
    cate_ads = np.argsort(ad_cate, kind="stable")
    cate_count = np.bincount(ad_cate, minlength=n_cates)
    cate_start = np.concatenate(([0], np.cumsum(cate_count)[:-1]))
    ad_item = ad_items(ad_id, cate_id[ad_cate], brand_id, ad_brand)
    catalogue = TaobaoCatalogue(
        user_id=distinct_ids(rng, n_users, NUM_BUCKETS["user_id"]),
        user_profile={k: v.astype(np.int64) for k, v in profile.items()},
        user_effect=rng.normal(0.0, 0.5, n_users),
        # Favourite categories are drawn through popular ads, so each has ads to show.
        user_fav_cates=ad_cate[ad_pop.sample(rng, n_users * 3)].reshape(n_users, 3),
        user_pop=ZipfSampler(n_users, 0.6),
        ad_id=ad_id,
        ad_cate=ad_cate,
        ad_brand=ad_brand,
        ad_campaign=ad_campaign,
        ad_customer=campaign_customer[ad_campaign],
        ad_price=ad_price,
        ad_effect=rng.normal(0.0, 0.5, n_ads),
        ad_pop=ad_pop,
        cate_id=cate_id,
        cate_effect=rng.normal(0.0, 0.3, n_cates),
        cate_gender=rng.normal(0.0, 1.0, n_cates),
        brand_id=brand_id,
        campaign_id=campaign_id,
        customer_id=customer_id,
        cate_ads=cate_ads,
        cate_start=cate_start,
        cate_count=cate_count,
        ad_item=ad_item,
        # A stream of its own: the click model's draws above are the same as before the buy label.
        **_conversion_effects(np.random.default_rng([seed, _TAG, (1 << 40) + 2]), n_users, n_ads),
    )
    calib = _draw(catalogue, np.random.default_rng([seed, _TAG, (1 << 40) + 1]), 50_000)
    catalogue.base = calibrate_base(calib["logit"], TARGET_POSITIVE_RATE)
    click_prob = sigmoid(catalogue.base + calib["logit"])
    catalogue.cvr_base = calibrate_base(calib["cvr_logit"], TARGET_CVR, weights=click_prob)  # among clicks
    return catalogue


def ad_items(
    ad_id: np.ndarray, ad_cate_id: np.ndarray, brand_id: np.ndarray, ad_brand: np.ndarray
) -> pa.Array:
    """``"adgroup_id\\x03cate_id\\x03brand"`` per ad, a history item (brand empty when ``ad_brand`` is -1)."""
    brand_str = pa.array(np.where(ad_brand >= 0, brand_id[ad_brand], 0), mask=ad_brand < 0).cast(pa.string())
    return pc.binary_join_element_wise(
        pa.array(ad_id).cast(pa.string()),
        pa.array(ad_cate_id).cast(pa.string()),
        brand_str,
        "\x03",
        null_handling="replace",
        null_replacement="",
    )


def _conversion_effects(rng: np.random.Generator, n_users: int, n_ads: int) -> dict[str, np.ndarray]:
    return {"user_buy_effect": rng.normal(0.0, 0.7, n_users), "ad_cvr_effect": rng.normal(0.0, 0.7, n_ads)}


def _ads_in_cates(cat: TaobaoCatalogue, rng: np.random.Generator, cates: np.ndarray) -> np.ndarray:
    pos = cat.cate_start[cates] + (rng.random(cates.size) * cat.cate_count[cates]).astype(np.int64)
    return cat.cate_ads[pos]


def history_lengths(rng: np.random.Generator, n: int) -> np.ndarray:
    """History lengths: ~18% empty, else mostly geometric (mean 3.6) with a 5% long tail; at most 100."""
    short = rng.geometric(1.0 / 3.6, n)
    long = 8 + rng.lognormal(np.log(20.0), 0.8, n).astype(np.int64)
    lengths = np.where(rng.random(n) < 0.05, long, short)
    lengths[rng.random(n) < 0.18] = 0
    return np.minimum(lengths, MAX_HISTORY).astype(np.int64)


def _first_match_recency(rows: np.ndarray, pos: np.ndarray, match: np.ndarray, n: int) -> np.ndarray:
    """Per row, ``RECENCY_DECAY ** position`` of its most recent matching item (0 without a match)."""
    out = np.zeros(n)
    hit_rows = rows[match]
    if hit_rows.size:
        first_rows, first_idx = np.unique(hit_rows, return_index=True)  # items are row-major, recent first
        out[first_rows] = RECENCY_DECAY ** pos[match][first_idx]
    return out


def _draw(cat: TaobaoCatalogue, rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    """Index-level draws of ``n`` rows and their logit without the base."""
    user = cat.user_pop.sample(rng, n)
    fav_cate = cat.user_fav_cates[user, rng.integers(0, 3, n)]
    targeted = rng.random(n) < 0.35  # the ad server often shows ads from the user's favourite categories
    ad = np.where(targeted, _ads_in_cates(cat, rng, fav_cate), cat.ad_pop.sample(rng, n))

    lengths = history_lengths(rng, n)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    item_row = np.repeat(np.arange(n), lengths)
    item_pos = np.arange(item_row.size) - offsets[item_row]
    item_user = user[item_row]
    from_fav = rng.random(item_row.size) < 0.7
    item_cates = cat.user_fav_cates[item_user, rng.integers(0, 3, item_row.size)]
    item_ad = np.where(from_fav, _ads_in_cates(cat, rng, item_cates), cat.ad_pop.sample(rng, item_row.size))

    ad_cate, ad_brand = cat.ad_cate[ad], cat.ad_brand[ad]
    cate_rec = _first_match_recency(item_row, item_pos, cat.ad_cate[item_ad] == ad_cate[item_row], n)
    brand_match = (cat.ad_brand[item_ad] == ad_brand[item_row]) & (ad_brand[item_row] >= 0)
    brand_rec = _first_match_recency(item_row, item_pos, brand_match, n)

    pid = (rng.random(n) < 0.4).astype(np.int64)
    prof = {k: v[user] for k, v in cat.user_profile.items()}
    gender_sign = np.where(prof["final_gender_code"] == 2, 1.0, -1.0)
    price_z = (np.log(cat.ad_price[ad]) - np.log(80.0)) / 1.3
    logit = (
        cat.user_effect[user]
        + cat.ad_effect[ad]
        + cat.cate_effect[ad_cate]
        + 0.25 * gender_sign * cat.cate_gender[ad_cate]
        - 0.15 * (3 - prof["pvalue_level"]) * price_z
        + 0.05 * (prof["age_level"] - 3)
        + 0.05 * (prof["shopping_level"] - 2)
        + 0.1 * (1 - 2 * pid)
        - 0.15 * (lengths == 0)
        + CATE_MATCH_EFFECT * cate_rec
        + BRAND_MATCH_EFFECT * brand_rec
    )
    cvr_logit = (
        cat.user_buy_effect[user]
        + cat.ad_cvr_effect[ad]
        - 0.3 * price_z
        + 0.15 * (prof["shopping_level"] - 2)
        + 0.8 * cate_rec
    )
    return {
        "user": user,
        "ad": ad,
        "cvr_logit": cvr_logit,
        "pid": pid,
        "lengths": lengths,
        "offsets": offsets,
        "item_ad": item_ad,
        "logit": logit,
        **{f"profile:{k}": v for k, v in prof.items()},
    }


def make_chunk(
    cat: TaobaoCatalogue, seed: int, chunk: int | tuple[int, ...], n: int
) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """Rows of chunk ``chunk`` (deterministic for ``seed``; a tuple names a stream of its own, e.g. a
    day's chunk): the table, its labels ``(n, 2)`` (``clk``, ``buy``) and their true probabilities ``(n, 2)``."""
    rng = np.random.default_rng([seed, _TAG, *(chunk if isinstance(chunk, tuple) else (chunk,))])
    d = _draw(cat, rng, n)
    prob = sigmoid(cat.base + d["logit"])
    clk = (rng.random(n) < prob).astype(np.int64)
    ad, brand = d["ad"], cat.ad_brand[d["ad"]]
    history = pa.ListArray.from_arrays(
        pa.array(d["offsets"].astype(np.int32)), cat.ad_item.take(d["item_ad"])
    )
    columns: dict[str, pa.Array] = {"user_id": pa.array(cat.user_id[d["user"]])}
    for name in cat.user_profile:  # cms_segid ... new_user_class_level, in the dataset's order
        columns[name] = pa.array(d[f"profile:{name}"])
    columns.update(
        adgroup_id=pa.array(cat.ad_id[ad]),
        cate_id=pa.array(cat.cate_id[cat.ad_cate[ad]]),
        campaign_id=pa.array(cat.campaign_id[cat.ad_campaign[ad]]),
        customer=pa.array(cat.customer_id[cat.ad_customer[ad]]),
        brand=pa.array(np.where(brand >= 0, cat.brand_id[brand], 0), mask=brand < 0),
        price=pa.array(cat.ad_price[ad]),
        pid=pa.array(PIDS).take(pa.array(d["pid"])),
        clk=pa.array(clk),
        time_stamp=pa.array(rng.integers(FIRST_DAY, FIRST_DAY + DAYS * 86_400, n)),
        click_50_seq=pc.binary_join(history, "|"),
        true_prob=pa.array(prob),
    )
    # Drawn after every click column, so those are the same as without the buy label.
    buy_prob = prob * sigmoid(cat.cvr_base + d["cvr_logit"])
    buy = clk * (rng.random(n) < buy_prob / prob).astype(np.int64)
    columns.update(buy=pa.array(buy), true_buy_prob=pa.array(buy_prob))
    labels = np.stack([clk, buy], axis=1).astype(np.int8)
    return pa.table(columns), labels, np.stack([prob, buy_prob], axis=1).astype(np.float32)


LABELS = ("clk", "buy")  # the label columns make_chunk returns, in order
