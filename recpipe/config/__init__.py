"""The ground floor: recpipe's typed configuration, its strict YAML loader, ``{NAME}`` placeholders and the
catalogues of names (models, export backends). Imports no other recpipe package; every package may import it.

- :mod:`recpipe.config.root`: the whole config (:class:`RecpipeConfig`), ``load_config``, ``--set`` parsing;
- :mod:`recpipe.config.sections`: the bases of every section (a model's ``model:`` section is declared on
  :class:`ModelSection` in the model's own folder, a file that imports only ``recpipe.config``);
- :mod:`recpipe.config.features`: the ``features:`` and ``feature_groups:`` sections;
- :mod:`recpipe.config.catalogue`: name → module of every model and export backend;
- :mod:`recpipe.config.strict_yaml`, :mod:`recpipe.config.placeholders`.

A model's section file imports from those submodules, never from this package: the names here include
:mod:`~recpipe.config.root`, which resolves the model sections.
"""

from recpipe.config.features import (
    FeatureGroupConfig,
    FeatureSection,
    IdFeatureConfig,
    RawFeatureConfig,
    SequenceFeatureConfig,
    SubFeatureConfig,
)
from recpipe.config.root import (
    ConfigError,
    CsvOptions,
    DataConfig,
    EvalConfig,
    ExportConfig,
    FeatureConfig,
    GateConfig,
    OptimizerConfig,
    ParameterError,
    RecpipeConfig,
    SplitConfig,
    TrackingConfig,
    TrainConfig,
    flatten,
    gate_overrides,
    load_config,
    parse_config,
    parse_overrides,
    set_dotted,
)
from recpipe.config.sections import ConfigSection, MlpConfig, ModelSection, Strict, check_group_refs

__all__ = [
    "ConfigError",
    "ConfigSection",
    "CsvOptions",
    "DataConfig",
    "EvalConfig",
    "ExportConfig",
    "FeatureConfig",
    "FeatureGroupConfig",
    "FeatureSection",
    "GateConfig",
    "IdFeatureConfig",
    "MlpConfig",
    "ModelSection",
    "OptimizerConfig",
    "ParameterError",
    "RawFeatureConfig",
    "RecpipeConfig",
    "SequenceFeatureConfig",
    "SplitConfig",
    "Strict",
    "SubFeatureConfig",
    "TrackingConfig",
    "TrainConfig",
    "check_group_refs",
    "flatten",
    "gate_overrides",
    "load_config",
    "parse_config",
    "parse_overrides",
    "set_dotted",
]
