"""The shipped models' declarations (config section, feature-group check, builder), one module per model,
named in :data:`recpipe.models.registry.MODELS`. Their ``nn.Module`` s live one level up and are imported
inside ``build``, so loading a config imports no torch."""
