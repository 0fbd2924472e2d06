"""The built-in model's character tokenizer, as a real Hugging Face tokenizer.

One token per character, so the arithmetic task's answers (digits written least significant first)
are spelled digit by digit and a reward is a plain string comparison. It is a ``tokenizers``
WordLevel model behind a per-character split, wrapped in ``PreTrainedTokenizerFast``: it saves
into a checkpoint directory next to the weights and ``AutoTokenizer.from_pretrained`` loads it back,
so a warm-started checkpoint is an ordinary Hugging Face model directory.
"""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)
# Digits and the two operators are all the built-in task needs; "-" and space are there so that a
# hand-written prompt with them encodes to real tokens instead of <unk>. Order fixes the ids: never
# reorder (it would silently scramble every saved checkpoint's embeddings).
CHARACTERS = tuple("0123456789+=- ")


def build_tokenizer() -> PreTrainedTokenizerFast:
    """A fresh character tokenizer: ``<pad>`` = 0, ``<s>`` = 1, ``</s>`` = 2, ``<unk>`` = 3, then
    one id per character. Encoding a text prepends ``<s>`` (the model always conditions on it)."""
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + CHARACTERS)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    # Fuse concatenates the characters back without the spaces WordLevel decoding would insert.
    core.decoder = decoders.Fuse()
    core.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        # Generation batches pad on the left so every prompt ends where its response starts.
        padding_side="left",
        model_max_length=512,
        clean_up_tokenization_spaces=False,
    )
