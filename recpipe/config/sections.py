"""The base classes of every config section, and the parts a model's section is made of.

A model declares its ``model:`` section in its own folder (``recpipe/models/<name>/config.py``) on
:class:`ModelSection`; such a file imports only ``recpipe.config`` modules (the ground floor), so loading a
config never imports torch or any model code.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Annotated, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field


class Strict(BaseModel):
    """A config section: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=False)


class MlpConfig(Strict):
    hidden_units: list[int] = Field(min_length=1)
    activation: Literal["relu", "gelu", "silu", "dice"] = "relu"
    batch_norm: bool = False
    dropout: float = Field(0.0, ge=0.0, lt=1.0)


class BceLossConfig(Strict):
    """Binary cross-entropy on the logit (the default loss)."""

    type: Literal["bce"] = "bce"


class FocalLossConfig(Strict):
    """Binary focal loss (TorchEasyRec's ``binary_focal_loss``, tzrec/loss/focal_loss.py): each row's BCE
    weighted by ``alpha·y·(1-p)^gamma + (1-alpha)·(1-y)·p^gamma`` (``p = sigmoid(logit)``, the weight held
    constant in the gradient), then averaged as BCE is.

    Example::

        loss: {type: focal, gamma: 2.0, alpha: 0.5}   # TorchEasyRec's defaults
    """

    type: Literal["focal"]
    gamma: float = Field(2.0, ge=0.0)
    alpha: float = Field(0.5, gt=0.0, lt=1.0)


class JrcLossConfig(Strict):
    """TorchEasyRec's ``jrc_loss`` (tzrec/loss/jrc_loss.py, arXiv 2208.06164) of a two-class task tower
    (``num_class: 2``, logits ``l0``, ``l1``): ``alpha · CE + (1 - alpha) · session term``, the session term
    each row's softmax cross-entropy among the rows of its session (the first id of feature ``session`` in
    the batch) of the other label: a positive's ``l1`` against its session's negatives' ``l1``, a negative's
    ``l0`` against its session's positives' ``l0``.

    Example::

        num_class: 2
        loss: {type: jrc, session: user_id, alpha: 0.5}   # TorchEasyRec's default alpha
    """

    type: Literal["jrc"]
    session: str
    alpha: float = Field(0.5, ge=0.0, le=1.0)


LossConfig = Annotated[BceLossConfig | FocalLossConfig | JrcLossConfig, Field(discriminator="type")]


class VariationalDropoutConfig(Strict):
    """Feature-selection variational dropout (TorchEasyRec's ``variational_dropout``,
    tzrec/modules/variational_dropout.py, docs/source/usage/feature_selection.md): training drops each feature
    of a deep group with a learnt probability ``sigmoid(p_f)`` (a concrete, relaxed Bernoulli draw per row)
    and adds ``regularization_lambda / B · Σ_f (1 - sigmoid(p_f))`` to the loss; evaluation and serving scale
    each feature by its keep probability ``1 - sigmoid(p_f)``, as TorchEasyRec's eval mode does.

    Example::

        model: {type: dbmtl, variational_dropout: {regularization_lambda: 0.01}, ...}
    """

    regularization_lambda: float = Field(0.01, ge=0.0)


class ConfigSection(Strict):
    """A part of the config declared outside ``recpipe/config/`` (a model's section and its parts): unknown
    keys are errors, as everywhere in the config."""


class ModelSection(ConfigSection):
    """Base of a model's config section. Each model declares its subclass in its own folder (with
    ``type: Literal["<name>"]`` and ``check_groups``); :data:`recpipe.config.catalogue.MODELS` maps ``type``
    to it."""

    type: str

    def domains(self) -> tuple[str, int] | None:
        """``(domain label, number of domains)`` of a model with a tower per task and domain (PEPNet's
        ``domain_label``): FG reads that label as each row's domain index; None (every other model): no
        domain towers."""
        return None


class _Named(Protocol):
    name: str


def check_group_refs(used: Iterable[str], groups: Sequence[_Named]) -> None:
    """What a model config's ``check_groups`` calls: raise ``ValueError`` naming every group in ``used``
    that ``groups`` (the config's :class:`~recpipe.config.features.FeatureGroupConfig` s) does not define."""
    defined = {g.name for g in groups}
    bad = [g for g in used if g not in defined]
    if bad:
        raise ValueError(f"model refers to unknown feature groups {bad}; defined: {sorted(defined)}")
