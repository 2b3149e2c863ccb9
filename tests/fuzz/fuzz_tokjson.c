/* Fuzz target: tok.h loading a tokenizer.json from arbitrary bytes (bounded: ids below 2^16), then
   encoding, decoding and streaming with it: fuzz_tok.c compiled with FUZZ_TOK_JSON. */
#define FUZZ_TOK_JSON
#include "fuzz_tok.c"
