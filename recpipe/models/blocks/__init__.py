"""The blocks models are built of: MLP (:mod:`.mlp`), jagged DIN attention (:mod:`.din`), dot interaction
(:mod:`.interaction`), the factorization machine (:mod:`.fm`), multi-task heads (:mod:`.multitask`), all plain
torch; and the embedding lookups (:mod:`.embedding`, TorchRec). This package imports nothing."""
