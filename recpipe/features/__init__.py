"""Features: FeatureSpec, fitting, vectorized feature generation (FG) and fg.json."""
