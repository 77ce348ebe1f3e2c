"""Feature kinds, one module each: what a kind of feature (the config's ``kind:``) becomes in the FeatureSpec,
what fitting it needs, and its vectorized FG. Named in :data:`recpipe.config.catalogue.FEATURE_KINDS` and
found by :func:`recpipe.features.kinds.registry.feature_kind`. This package imports nothing."""
