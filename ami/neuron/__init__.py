"""The kit's Neuron serving engine: an OpenAI-compatible server for Gemma 4 on inf2/trn1.

See README.md in this directory. Importing the package loads nothing heavy; torch,
transformers and the Neuron SDK are imported by the generator that needs them.
"""
