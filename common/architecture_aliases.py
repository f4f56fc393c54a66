"""Hand-listed architecture aliases for R4: source class -> class the engine registers.

An entry goes here only with a test that serves a tiny random model of the source architecture
on the real engine under the target and gets the same greedy tokens as transformers' own
`generate` on the same weights. Never by name similarity. None has been needed yet: every case
seen so far is covered by the model_type's canonical class (R4's principled path).
"""

ALIASES = {}
