import torch
import torch.nn.functional as F

from trainer.model import build_tiny_model
from trainer.policy import response_logprobs
from trainer.tokenizer import build_tokenizer


def _unpadded(model, prompt: list[int], response: list[int], temperature: float):
    ids = torch.tensor([prompt + response])
    logits = model(ids).logits[0, len(prompt) - 1:-1] / temperature
    log_p = F.log_softmax(logits, -1)
    lp = log_p.gather(-1, torch.tensor(response).unsqueeze(-1)).squeeze(-1)
    return lp, -(log_p.exp() * log_p).sum(-1)


def test_padded_batch_matches_per_sequence_computation() -> None:
    tok = build_tokenizer()
    model = build_tiny_model(tok, seed=1).eval()
    prompts = [tok(t)["input_ids"] for t in ("1+2=", "123+456=", "45+6=")]
    responses = [[5, 6, 7, 2], [8], [9, 10]]
    with torch.no_grad():
        logprobs, entropy, mask = response_logprobs(model, prompts, responses, tok.pad_token_id,
                                                    temperature=0.7)
        assert logprobs.shape == entropy.shape == mask.shape == (3, 4)
        assert mask.sum(-1).tolist() == [4, 1, 2]
        for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
            lp, ent = _unpadded(model, p, r, 0.7)
            assert torch.allclose(logprobs[i, :len(r)], lp, atol=1e-5)
            assert torch.allclose(entropy[i, :len(r)], ent, atol=1e-5)
            assert torch.all(logprobs[i, len(r):] == 0)


def test_gradients_flow() -> None:
    tok = build_tokenizer()
    model = build_tiny_model(tok)
    logprobs, _, mask = response_logprobs(model, [[1, 5, 14, 6, 15]], [[7, 2]], tok.pad_token_id)
    (logprobs * mask).sum().backward()
    assert model.get_input_embeddings().weight.grad is not None
