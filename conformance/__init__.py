"""The conformance matrix: architectures x engine generations, greedy tokens against the author's
transformers, through each card's launcher (README.md in this folder)."""
