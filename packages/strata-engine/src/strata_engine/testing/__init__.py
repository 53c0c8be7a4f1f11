"""Test support as code: tiny GGUF writers, the float64 reference forward, vocabularies, the
llama.cpp comparison helpers and the Triton interpreter set-up, shared by the tests of every
package, the benchmarks and the tools. Nothing in the engine imports it; several of its modules
need the `test` extra (torch, pytest)."""
