"""Pipeline stages: ``run(paths, primitives) -> small result``. Components and the CLI call these."""
