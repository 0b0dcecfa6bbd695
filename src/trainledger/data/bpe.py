"""Real tokenizers: a Hugging Face `tokenizers` model (a tokenizer.json, a .tiktoken rank file, or a byte-level
BPE trained here), behind the same small interface as the byte tokenizer.

    from trainledger.data import load_tokenizer
    tokenizer = load_tokenizer("gpt2/tokenizer.json")   # or "bytes", or "cl100k_base.tiktoken"
    ids = tokenizer.encode("hello world")               # np.ndarray of ids
    tokenizer.decode(ids) == "hello world"

Every tokenizer has `.name`, `.sha256` (the identity a token file, a run and a checkpoint record), `.vocab_size`
(the largest id + 1, special tokens included), `.encode`, `.encode_batch` (parallel over all cores: the
library's Rust thread pool), `.decode` and `.save(path)`. Nothing here touches the network, and no file is
unpickled: a tokenizer.json is parsed by the library's JSON reader, a .tiktoken file line by line.

A .tiktoken file holds only the ranks (base64 token, rank per line), not the regular expression that splits
text before BPE nor the special tokens; both come from the file's name, as tiktoken's own registry gives them
(tiktoken_ext/openai_public.py): r50k_base / p50k_base / gpt2 use GPT-2's pattern and <|endoftext|> = 50256;
cl100k_base (and any other name, e.g. Llama 3's tokenizer, which shares cl100k's pattern) the cl100k pattern;
o200k_base the o200k pattern. The ranks become a BPE whose merges are every split of a token into two tokens,
ordered by the rank of the result: merging the adjacent pair with the lowest merged rank first is exactly
tiktoken's rule (Sennrich et al., arXiv:1508.07909, as applied to bytes by GPT-2, Radford et al. 2019 §2.2).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from pathlib import Path

import numpy as np

from trainledger.data.limits import check_merge_search, check_rank, check_tokenizer_ids
from trainledger.data.tokens import check_input, dtype_for_vocab, readable_by_all
from trainledger.errors import TrainledgerError

# Names under which a tokenizer's end-of-text token goes (GPT-2/tiktoken, Llama 2, Llama 3, Gemma): the id put
# between the documents of a dataset.
EOT_NAMES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>")
MAX_TOKENIZER_BYTES = 512 * 2**20       # the largest published tokenizer.json files are tens of MB

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
CL100K_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                  r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
O200K_PATTERN = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""", r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""", r"""\s*[\r\n]+""", r"""\s+(?!\S)""", r"""\s+""",
])
# tiktoken_ext/openai_public.py (tiktoken 0.14): pattern and special tokens of each published rank file
TIKTOKEN_KNOWN = {
    "gpt2": (GPT2_PATTERN, {"<|endoftext|>": 50256}),
    "r50k_base": (GPT2_PATTERN, {"<|endoftext|>": 50256}),
    "p50k_base": (GPT2_PATTERN, {"<|endoftext|>": 50256}),
    "cl100k_base": (CL100K_PATTERN, {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
                                     "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276}),
    "o200k_base": (O200K_PATTERN, {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}),
}


class HFTokenizer:
    """A `tokenizers.Tokenizer` with trainledger's interface: name, sha256, vocab_size, encode, decode, save.

    `sha256` is the hash of the tokenizer's canonical JSON (`Tokenizer.to_str()`), so a tokenizer saved and
    loaded again, or a .tiktoken file and the tokenizer.json it converts to, keep one identity.
    """

    def __init__(self, backend, name: str, allowed_special=()):
        self.backend = backend
        self.name = name
        self._json = backend.to_str()
        self.sha256 = hashlib.sha256(self._json.encode("utf-8")).hexdigest()
        # Special tokens as tiktoken treats them: ordinary text never gives a special id unless the caller allows
        # that token (`allowed_special`, here or per call); the library itself encodes every string as text
        # (encode_special_tokens, not part of the JSON, so the identity above is unchanged).
        self.special_tokens = {t.content: i for i, t in backend.get_added_tokens_decoder().items() if t.special}
        self.allowed_special = frozenset(allowed_special)
        backend.encode_special_tokens = True
        vocab = backend.get_vocab(with_added_tokens=True)
        if not vocab:
            raise TrainledgerError(f"tokenizer {name} has an empty vocabulary")
        self.vocab_size = max(vocab.values()) + 1
        self.dtype = dtype_for_vocab(self.vocab_size)
        self.eot_id = next((vocab[t] for t in EOT_NAMES if t in vocab), None)
        self.chunk_safe = _splits_after_newlines(backend)

    def allowed(self, allowed_special=None) -> frozenset:
        """The special tokens matched in text: `allowed_special` ("all", or some of self.special_tokens), or when
        None this tokenizer's own `allowed_special`; a one-line error for a string that is no special token."""
        if allowed_special is None:
            return self.allowed_special
        if allowed_special == "all":
            return frozenset(self.special_tokens)
        wanted = frozenset([allowed_special] if isinstance(allowed_special, str) else allowed_special)
        unknown = sorted(wanted - set(self.special_tokens))
        if unknown:
            raise TrainledgerError(f"--allow-special: {unknown[0][:40]!r} is not a special token of tokenizer "
                                   f"{self.name} (its special tokens: {', '.join(sorted(self.special_tokens)) or 'none'})")
        return wanted

    def encode(self, text: str, allowed_special=None) -> np.ndarray:
        """The ids of `text` (no BOS/EOS added); a special token's string gives its id only when allowed (see
        `allowed`), else it is encoded as the ordinary text it is (tiktoken's encode / encode_ordinary)."""
        allowed = self.allowed(allowed_special)
        if allowed and any(token in text for token in allowed):
            return self.encode_batch([text], allowed)[0]
        return np.asarray(self.backend.encode(text, add_special_tokens=False).ids, dtype=self.dtype)

    def encode_batch(self, texts: list[str], allowed_special=None) -> list[np.ndarray]:
        """The ids of each text (as encode), encoded in parallel on all cores (the library's thread pool)."""
        encode = getattr(self.backend, "encode_batch_fast", self.backend.encode_batch)   # _fast: no offsets (>= 0.21)
        allowed = self.allowed(allowed_special)
        if not allowed or not any(token in text for text in texts for token in allowed):
            return [np.asarray(e.ids, dtype=self.dtype) for e in encode(texts, add_special_tokens=False)]
        return split_specials_encode(texts, allowed, self.special_tokens,
                                     lambda pieces: [e.ids for e in encode(pieces, add_special_tokens=False)], self.dtype)

    def decode(self, ids) -> str:
        """The text of `ids`, special tokens kept (so that decode(encode(text)) == text)."""
        array = np.asarray(ids).reshape(-1)
        if array.size and (int(array.min()) < 0 or int(array.max()) >= self.vocab_size):
            raise TrainledgerError(f"token ids must lie in [0, {self.vocab_size - 1}] for tokenizer {self.name}, "
                                   f"got values in [{int(array.min())}, {int(array.max())}]")
        return self.backend.decode(array.tolist(), skip_special_tokens=False)

    def save(self, path) -> Path:
        """Writes the tokenizer.json (atomically; never through a link nor onto a device or a second hard link:
        files.replace_output); its path. Whether a file already there may go is the caller's to decide."""
        from trainledger.files import replace_output
        path = Path(path)
        with replace_output(path, "tokenizer", "a tokenizer") as tmp:
            tmp.write_text(self._json, encoding="utf-8")
            readable_by_all(tmp)
        return path

    def __repr__(self) -> str:
        return f"HFTokenizer({self.name!r}, vocab_size={self.vocab_size}, sha256={self.sha256[:12]}…)"


def split_specials_encode(texts: list[str], allowed, ids_of: dict, encode_pieces, dtype) -> list[np.ndarray]:
    """Each text cut at the `allowed` special tokens (the longest first, as tiktoken matches them), the pieces
    between encoded as ordinary text in one batch (`encode_pieces`), each special token its id (`ids_of`)."""
    import re
    pattern = re.compile("(" + "|".join(re.escape(t) for t in sorted(allowed, key=len, reverse=True)) + ")")
    splits = [pattern.split(text) for text in texts]
    ordinary = [part for parts in splits for part in parts[0::2] if part]
    encoded = iter(encode_pieces(ordinary) if ordinary else [])
    out = []
    for parts in splits:
        ids: list[int] = []
        for index, part in enumerate(parts):
            if index % 2:
                ids.append(ids_of[part])
            elif part:
                ids.extend(next(encoded))
        out.append(np.asarray(ids, dtype=dtype))
    return out


def _splits_after_newlines(backend) -> bool:
    """Whether text may be cut after a newline between two non-space characters with the same ids as whole.

    True when no normalizer changes the text and the pre-tokenizer puts a boundary there (GPT-2's ByteLevel
    pattern, cl100k, o200k, Llama 3); False for SentencePiece-style tokenizers that run BPE over whole lines.
    """
    probe = "ab\ncd"
    if backend.normalizer is not None and backend.normalizer.normalize_str(probe) != probe:
        return False
    if backend.pre_tokenizer is None:
        return False
    pieces = backend.pre_tokenizer.pre_tokenize_str(probe)
    return any(start == 3 for _, (start, _) in pieces)


def tokenizer_name(path: Path) -> str:
    """A short name for a tokenizer file: `gpt2/tokenizer.json` for `.../gpt2/tokenizer.json`, else the file's stem."""
    path = Path(path)
    if path.name == "tokenizer.json":
        parent = path.resolve().parent.name
        return f"{parent}/{path.name}"[-48:] if parent else path.name
    return path.stem[:48]


def load_hf(path, flag: str = "--tokenizer") -> HFTokenizer:
    """The tokenizer of a tokenizer.json or .tiktoken file; one-line errors for anything else."""
    from tokenizers import Tokenizer
    path = Path(path)
    raw = check_input(path, flag, "tokenizer file", max_bytes=MAX_TOKENIZER_BYTES).read_bytes()
    if path.suffix == ".tiktoken":
        return from_tiktoken(raw, tokenizer_name(path), path, flag)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise TrainledgerError(f"{flag} {path} is not a tokenizer.json (not UTF-8 JSON text)") from None
    if not text.lstrip().startswith("{"):
        raise TrainledgerError(f"{flag} {path} is not a tokenizer.json (a JSON object was expected)")
    check_tokenizer_ids(text, path, flag)        # an id of 3e9 makes the library allocate 8 GB and abort
    try:
        backend = Tokenizer.from_str(text)
    except Exception as error:      # the library raises a bare Exception with serde's message
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise TrainledgerError(f"{flag} {path} is not a valid tokenizer.json: {reason}") from None
    return HFTokenizer(backend, tokenizer_name(path))


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's map of the 256 byte values to printable characters (the ByteLevel alphabet).

    Printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves; the other 68 take the code
    points 256, 257, ... in byte order (GPT-2's encoder.py, Radford et al. 2019; the `tokenizers` ByteLevel
    pre-tokenizer uses the same table).
    """
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for byte in range(256):
        if byte in keep:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


def read_tiktoken_ranks(raw: bytes, path, flag: str = "--tokenizer") -> dict[bytes, int]:
    """{token bytes: rank} of a .tiktoken file (one `base64-token rank` per line)."""
    ranks: dict[bytes, int] = {}
    for number, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        try:
            if len(parts) != 2:
                raise ValueError
            token, rank = base64.b64decode(parts[0], validate=True), int(parts[1])
        except (ValueError, binascii.Error):
            raise TrainledgerError(f"{flag} {path} is not a .tiktoken rank file: line {number} is not "
                                   "'<base64 token> <rank>'") from None
        check_rank(rank, number, path, flag, token)
        if not token or token in ranks:
            raise TrainledgerError(f"{flag} {path}: line {number} repeats a token or has an empty token or a "
                                   "negative rank")
        ranks[token] = rank
    if not ranks:
        raise TrainledgerError(f"{flag} {path} holds no ranks (an empty .tiktoken file)")
    if len(set(ranks.values())) != len(ranks):
        raise TrainledgerError(f"{flag} {path}: two tokens share a rank")
    check_merge_search(map(len, ranks), path, flag)
    return ranks


def from_tiktoken(raw: bytes, name: str, path="(ranks)", flag: str = "--tokenizer") -> HFTokenizer:
    """A byte-level BPE equivalent to tiktoken's encoding of the ranks in `raw` (see the module docstring)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    ranks = read_tiktoken_ranks(raw, path, flag)
    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        raise TrainledgerError(f"{flag} {path}: a byte-level rank file must rank all 256 single bytes; "
                               f"{len(missing)} are missing (e.g. byte {missing[0]})")
    pattern, specials = TIKTOKEN_KNOWN.get(name, (CL100K_PATTERN, None))
    if specials is None or min(specials.values()) <= max(ranks.values()):     # not that file: one end-of-text
        specials = {"<|endoftext|>": max(ranks.values()) + 1}
    table = bytes_to_unicode()

    def show(token: bytes) -> str:
        return "".join(table[b] for b in token)

    vocab = {show(token): rank for token, rank in ranks.items()}
    vocab.update(specials)          # in the model's vocabulary, special tokens keep their ids when added below
    merges = []
    for token, rank in ranks.items():
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in ranks and right in ranks:
                merges.append((rank, ranks[left], ranks[right], show(left), show(right)))
    merges.sort()
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[(m[3], m[4]) for m in merges], ignore_merges=True))
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([AddedToken(content, special=True, normalized=False) for content in specials])
    return HFTokenizer(backend, name)


def check_special_tokens(special_tokens, flag: str = "--special-token") -> list[str]:
    """The special tokens, <|endoftext|> first, each once; a one-line error for an empty or oversized one."""
    tokens = ["<|endoftext|>"]
    for token in special_tokens or ():
        if not isinstance(token, str) or not token.strip() or len(token) > 256:
            raise TrainledgerError(f"{flag} must be a non-blank string of at most 256 characters, got {token!r}")
        if token not in tokens:
            tokens.append(token)
    return tokens


def split_on_specials(texts, special_tokens) -> object:
    """The pieces of each text between its special tokens (which are dropped): what a BPE trainer must count,
    so that a separator such as <|endoftext|> is never learned as text (its `<|`, `|>` and `endoftext`)."""
    import re
    pattern = re.compile("|".join(re.escape(t) for t in sorted(special_tokens, key=len, reverse=True)))
    for text in texts:
        if not any(t in text for t in special_tokens):
            yield text
            continue
        yield from (piece for piece in pattern.split(text) if piece)


def train_bpe(texts, vocab_size: int, name: str | None = None, show_progress: bool = False,
              length: int | None = None, special_tokens=()) -> HFTokenizer:
    """A byte-level BPE (GPT-2's pre-tokenizer and byte alphabet, <|endoftext|> = id 0, then `special_tokens`
    at ids 1, 2, ...) trained on `texts`.

    `texts`: an iterable of strings (streamed; the library counts pairs in parallel). Each is first split on
    the special tokens, which are never counted as text (the library's trainer does not split on them itself;
    GPT-2's encoder treats <|endoftext|> the same way). The vocabulary holds the 256 bytes, the special tokens
    and up to vocab_size − 256 − len(specials) merges; a text too small for that many merges gives fewer (the
    returned vocab_size says how many). The `special_tokens` given are matched in text by default (the caller
    asked for them); <|endoftext|> only when allowed (HFTokenizer.allowed).

    Ties between equally frequent pairs are broken as the `tokenizers` library's BpeTrainer breaks them (the pair
    of the smallest token ids in its numbering); data/bpe_train.py has the lexicographic rule of GPT-2-style
    reference trainers (`tokenize --bpe-ties`); both are deterministic.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    specials = check_special_tokens(special_tokens)
    vocab_size = int(vocab_size)
    smallest = 256 + len(specials)
    if not smallest <= vocab_size <= 2**20:
        raise TrainledgerError(f"--train-bpe must be a vocabulary size from {smallest} (256 bytes + "
                               f"{len(specials)} special token{'s' if len(specials) > 1 else ''}) to {2**20}, "
                               f"got {vocab_size}")
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=show_progress,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(split_on_specials(texts, specials), trainer, length=length)
    return HFTokenizer(backend, name or f"bpe-{vocab_size}", allowed_special=special_tokens or ())


def with_special_tokens(tokenizer: HFTokenizer, special_tokens, flag: str = "--special-token") -> HFTokenizer:
    """A copy of `tokenizer` with `special_tokens` added (new ones after its largest id; ones in its vocabulary
    keep their ids) and allowed: matched whole in any text it encodes, never split by BPE, so two adjacent ones are
    two ids. Its identity (sha256) changes with new ones."""
    from tokenizers import AddedToken, Tokenizer
    if not special_tokens:
        return tokenizer
    wanted = [t for t in check_special_tokens(special_tokens, flag) if t in special_tokens]
    backend = Tokenizer.from_str(tokenizer.backend.to_str())
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in wanted])
    return HFTokenizer(backend, tokenizer.name, allowed_special=tokenizer.allowed_special | set(wanted))


def training_texts(path, text_column: str = "text", chunk_bytes: int = 1 << 24, flag: str = "INPUT"):
    """The texts a BPE is trained on, streamed: a dataset's documents (its text column), or a text file's pieces."""
    from trainledger.data.datasets import dataset_kind, iter_documents
    from trainledger.data.encode import file_chunks, text_pieces
    path = check_input(Path(path), flag, "input file")
    if dataset_kind(path):
        return iter_documents(path, text_column, flag)
    return (piece for pieces in text_pieces(file_chunks(path, chunk_bytes), path, flag) for piece in pieces)


def train_bpe_file(path, vocab_size: int, text_column: str = "text", chunk_bytes: int = 1 << 24,
                   progress: bool = False, flag: str = "INPUT", special_tokens=()) -> HFTokenizer:
    """A byte-level BPE trained on a text file or a dataset's text column (streamed), named bpe-<vocab>-<stem>."""
    texts = training_texts(path, text_column, chunk_bytes, flag)
    return train_bpe(texts, vocab_size, name=f"bpe-{int(vocab_size)}-{Path(path).stem}"[:48], show_progress=progress,
                     special_tokens=special_tokens)
