"""Data primitives: token files (header + memmap), random LM batches, a prefetcher, tokenizers, datasets.

    from trainledger.data import open_tokens, get_batch, load_tokenizer
    data = open_tokens("train.tokens")                    # np.memmap, nothing read yet
    x, y = get_batch(data, batch_size=32, context_length=1024, device="cuda")
    tokenizer = load_tokenizer("tokenizer.json")          # or "bytes", or a .tiktoken file

Token files and tokenizers need only NumPy (and the `tokenizers` library for real tokenizers, pyarrow for
Parquet/Arrow datasets, both imported on first use); the batch functions (which return torch tensors) are
imported on first use too, so `trainledger tokenize` starts without importing torch.
"""

from trainledger.data.tokenizer import (BYTES, VOCAB_SIZE, ByteTokenizer, Tokenizer, load_tokenizer, run_tokenizer,
                                        tokenize_file)
from trainledger.data.tokens import (DTYPES, HEADER_BYTES, MAGIC, TokenWriter, dtype_for_vocab, encode_header,
                                     open_tokens, read_header, write_tokens)

_BATCH_NAMES = ("BatchSampler", "Prefetcher", "gather_batch", "get_batch", "sample_starts", "seed_everything")


def __getattr__(name: str):
    if name in _BATCH_NAMES:
        from trainledger.data import batch
        return getattr(batch, name)
    raise AttributeError(f"module 'trainledger.data' has no attribute {name!r}")


__all__ = [
    "BYTES", "BatchSampler", "ByteTokenizer", "Tokenizer", "dtype_for_vocab", "load_tokenizer", "run_tokenizer", "DTYPES", "HEADER_BYTES", "MAGIC", "Prefetcher", "TokenWriter", "VOCAB_SIZE",
    "encode_header", "gather_batch", "get_batch", "open_tokens", "read_header", "sample_starts", "seed_everything",
    "tokenize_file", "write_tokens",
]
