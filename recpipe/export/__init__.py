"""Export: JIT, AOTInductor, ONNX, RTP (safetensors + fg.json + dense program) and TensorRT, each checked for
parity with the eager model, plus loaders that verify every file's sha256 first.

The public functions, each in its own module (imported from there: this package imports nothing, so
``import recpipe.export.rtp`` in a serving process stays free of torch's export machinery, torchrec and fbgemm)::

    recpipe.export.api.export(model, spec, cfg, backends, out_dir, parity_data) -> ExportOutcome
    recpipe.export.checkpoint.export_checkpoint(ckpt_dir, backends, out_dir, data_uri) -> ExportOutcome
    recpipe.export.outcome.read_outcome(out_dir) -> ExportOutcome | None   # what export.json records
    recpipe.export.loaders.load_backend(folder) -> Scorer   # .predict_batch(dense, values, lengths) / .predict_raw(rows)
    recpipe.export.rtp.RtpModel(folder)                      # the torchrec-free reference server
"""
