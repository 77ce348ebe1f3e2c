"""Fit what FG must learn from the training split: vocabularies (``min_freq``), quantile boundaries
(``num_quantile_buckets``) and zscore statistics. One streaming pass, only when something needs it."""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pyarrow.compute as pc

from recpipe.config import RecpipeConfig
from recpipe.data.sharding import Shard
from recpipe.data.types import Source
from recpipe.features.build import WIDE_SUFFIX, build_feature_spec
from recpipe.features.columns import to_float
from recpipe.features.hashing import to_string_array
from recpipe.features.kinds.base import FitNeeds
from recpipe.features.kinds.registry import feature_kind
from recpipe.features.outputs import outputs_of, with_feature_outputs
from recpipe.features.raw import normalize
from recpipe.features.spec import FeatureSpec, IdMapping, SparseFeature, sub_value_positions

QUANTILE_SAMPLE_ROWS = 1_000_000


def fit_needs(cfg: RecpipeConfig) -> FitNeeds:
    """What every feature's kind must learn from the training split (vocabularies, quantiles, zscore)."""
    out = FitNeeds()
    for f in cfg.features:
        out.add(feature_kind(f.kind).needs(f))
    return out


class StaleSpecError(ValueError):
    """An fg.json was fitted from another feature definition than the config's."""


def config_digest(cfg: RecpipeConfig) -> str:
    """sha256 of what the config says about features (the unfitted FeatureSpec it builds): a change of
    a feature, its mapping or size, the label or the groups changes it; training settings do not."""
    return build_feature_spec(cfg).digest()


def check_spec_matches(spec: FeatureSpec, cfg: RecpipeConfig, where: str) -> None:
    """Refuse a FeatureSpec fitted from another feature definition than ``cfg``'s.

    Args:
        spec (FeatureSpec): the loaded fg.json.
        cfg (RecpipeConfig): the config training runs with.
        where (str): the fg.json's path (named in the error).

    Raises:
        StaleSpecError: ``spec.config_digest`` is set and differs from ``cfg``'s.
    """
    want = config_digest(cfg)
    if spec.config_digest is not None and spec.config_digest != want:
        raise StaleSpecError(
            f"{where} was fitted from another feature definition than this config's (config digest "
            f"{spec.config_digest[:12]}, this config {want[:12]}): refit it (recpipe fit) or pass the right --fg"
        )


def fit_feature_spec(cfg: RecpipeConfig, source: Source | None) -> FeatureSpec:
    """The FeatureSpec for ``cfg`` with fitted vocabularies, boundaries and statistics.

    Args:
        cfg (RecpipeConfig): the config.
        source (Source | None): the training split; may be None when nothing needs fitting.
    """
    built = build_feature_spec(cfg)
    spec = dataclasses.replace(
        built, config_digest=built.digest()
    )  # config_digest(cfg), without a second build
    needs = fit_needs(cfg)
    vocab_keys, quant_keys, z_keys = needs.vocab, needs.quantiles, needs.zscore
    if not needs:
        return spec
    if source is None:
        raise ValueError(
            "the config asks for fitted features (min_freq / quantiles / zscore) but no training data was given"
        )
    counters: dict[str, Counter] = {k: Counter() for k in vocab_keys}
    samples: dict[str, list[np.ndarray]] = {k: [] for k in quant_keys}
    sampled = 0
    moments: dict[str, list[float]] = {k: [0.0, 0.0, 0.0] for k in z_keys}
    seqs = {s.name: s for s in spec.sequences}
    outputs = outputs_of(spec)
    for sb in source.iter_batches(Shard(0, 1)):
        batch = sb.batch
        if (
            outputs
        ):  # a vocabulary or statistics of a feature reading "feature:X": X's bucket ids, as FG derives them
            batch = with_feature_outputs(batch, outputs, normalize(batch, spec))
        for key in vocab_keys:
            feat = spec.feature(key)
            if feat.sequence is None:
                values = feature_kind(feat.kind).fit_values
                arr = values(feat, batch) if values else to_string_array(batch.column(feat.column))
            else:
                s = seqs[feat.sequence]
                items = pc.list_flatten(
                    pc.split_pattern(pc.fill_null(batch.column(s.column), ""), s.delimiter)
                )
                items = items.filter(pc.not_equal(items, ""))
                subs = pc.split_pattern(items, s.sub_delimiter)
                j = sub_value_positions([spec.feature(k) for k in s.sub_features])[s.sub_features.index(key)]
                arr = pc.list_element(subs.filter(pc.greater(pc.list_value_length(subs), j)), j)
            vc = pc.value_counts(arr.drop_null())
            counters[key].update(dict(zip(vc.field("values").to_pylist(), vc.field("counts").to_pylist())))
        if sampled < QUANTILE_SAMPLE_ROWS:
            for key in quant_keys:
                x, _ = to_float(batch.column(spec.feature(key).column), np.nan, key)
                samples[key].append(x[np.isfinite(x)])
            sampled += batch.num_rows
        for d in spec.dense:
            if d.name in z_keys:
                if d.kind == "raw":
                    x, _ = to_float(batch.column(d.column), d.default, d.column)
                else:  # a kind computing its value from its columns: that value, before normalizing
                    plain = dataclasses.replace(d, log_offset=None, mean=0.0, std=1.0)
                    x = feature_kind(d.kind).dense(plain, normalize(batch, spec))[0]
                if d.log_offset is not None:
                    x = np.log(np.clip(x + d.log_offset, 1e-12, None))
                x = x[np.isfinite(x)]
                m = moments[d.name]
                m[0] += x.size
                m[1] += float(x.sum())
                m[2] += float((x * x).sum())
    sparse = []
    fitted: dict[str, SparseFeature] = {}
    for f in spec.sparse:
        if f.name in vocab_keys:
            min_freq = vocab_keys[f.name]
            vocab = sorted(
                (v for v, c in counters[f.name].items() if c >= min_freq),
                key=lambda v: (-counters[f.name][v], v),
            )
            f = dataclasses.replace(
                f,
                mapping=IdMapping(
                    "vocab", len(vocab) + 1, vocab=vocab, default_value=f.mapping.default_value
                ),
            )
        elif f.name in quant_keys:
            values = np.concatenate(samples[f.name]) if samples[f.name] else np.zeros(0)
            q = (
                np.quantile(values, np.linspace(0, 1, quant_keys[f.name] + 1)[1:-1])
                if values.size
                else np.zeros(0)
            )
            bounds = [float(b) for b in np.unique(q)]
            f = dataclasses.replace(f, boundaries=bounds, mapping=IdMapping("identity", len(bounds) + 1))
        elif f.name.endswith(WIDE_SUFFIX) and f.name.removesuffix(WIDE_SUFFIX) in fitted:
            # A wide group's copy looks up rows by the fitted feature's own mapping.
            base = fitted[f.name.removesuffix(WIDE_SUFFIX)]
            f = dataclasses.replace(f, mapping=base.mapping, boundaries=base.boundaries)
        fitted[f.name] = f
        sparse.append(f)
    dense = []
    for d in spec.dense:
        if d.name in z_keys:
            n, s1, s2 = moments[d.name]
            mean = s1 / max(n, 1)
            std = float(np.sqrt(max(s2 / max(n, 1) - mean * mean, 0.0))) or 1.0
            d = dataclasses.replace(d, mean=mean, std=std)
        dense.append(d)
    return dataclasses.replace(spec, sparse=sparse, dense=dense)


__all__ = ["fit_feature_spec"]
