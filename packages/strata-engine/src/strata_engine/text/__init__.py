"""The text layer: GGUF tokenizers (BPE and SentencePiece, ids equal to llama.cpp's), chat
templates in a jinja2 sandbox, stop strings and incremental decoding of generated ids.

It sits below the engine: its modules import only each other, `strata_engine.api` and
`strata_engine.protocol` (checked by test_import_graph). Import the modules themselves;
this package re-exports nothing, so loading a tokenizer does not pull in jinja2.
"""
