"""Per-token log-probabilities and entropies of responses under the policy.

The PPO update recomputes these with gradients; the hf backend computes the "old" ones right after
sampling. Both go through ``response_logprobs`` so the two agree to float precision.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F


def pack_prompt_response(prompt_ids: Sequence[Sequence[int]], response_ids: Sequence[Sequence[int]],
                         pad_token_id: int, device: torch.device | str | None = None
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Lay out a batch as ``[left-padded prompt | right-padded response]``.

    Returns ``input_ids`` and ``attention_mask`` of shape [B, P + R], ``position_ids`` (the
    cumulative sum of the mask minus one, so each sequence counts from 0 at its first real token
    whatever its left padding) and the response mask [B, R].
    """
    if len(prompt_ids) != len(response_ids):
        raise ValueError(f"{len(prompt_ids)} prompts but {len(response_ids)} responses")
    batch = len(prompt_ids)
    p_len = max((len(p) for p in prompt_ids), default=0)
    r_len = max((len(r) for r in response_ids), default=0)
    input_ids = torch.full((batch, p_len + r_len), pad_token_id, dtype=torch.long)
    attention = torch.zeros((batch, p_len + r_len), dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompt_ids, response_ids, strict=True)):
        if len(p) == 0:
            raise ValueError(f"prompt {i} is empty: a response needs a context to condition on")
        input_ids[i, p_len - len(p):p_len] = torch.as_tensor(list(p), dtype=torch.long)
        input_ids[i, p_len:p_len + len(r)] = torch.as_tensor(list(r), dtype=torch.long)
        attention[i, p_len - len(p):p_len + len(r)] = 1
    position_ids = (attention.cumsum(-1) - 1).clamp(min=0)
    response_mask = attention[:, p_len:].to(torch.bool)
    if device is not None:
        input_ids, attention = input_ids.to(device), attention.to(device)
        position_ids, response_mask = position_ids.to(device), response_mask.to(device)
    return input_ids, attention, position_ids, response_mask


def response_logprobs(model: torch.nn.Module, prompt_ids: Sequence[Sequence[int]],
                      response_ids: Sequence[Sequence[int]], pad_token_id: int,
                      temperature: float = 1.0
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Log-probabilities of each response token under ``model`` at ``temperature``.

    ``log pi(y_t | x, y_<t) = log_softmax(logits_t / T)[y_t]`` and the entropy
    ``H_t = -sum_v p_v log p_v`` of the same tempered distribution (the distribution the sampler
    drew from, so the PPO ratio compares like with like).

    Returns ``(logprobs, entropy, mask)``, each [B, R] with R the longest response; positions past
    a response's end are 0 in ``logprobs``/``entropy`` and False in ``mask``. Gradients flow unless
    the caller disables them.
    """
    if temperature <= 0:
        raise ValueError("temperature must be > 0")
    device = next(model.parameters()).device
    input_ids, attention, position_ids, mask = pack_prompt_response(
        prompt_ids, response_ids, pad_token_id, device)
    r_len = mask.shape[1]
    if r_len == 0:
        empty = torch.zeros((len(prompt_ids), 0), device=device)
        return empty, empty.clone(), mask
    p_len = input_ids.shape[1] - r_len
    out = model(input_ids=input_ids, attention_mask=attention, position_ids=position_ids,
                use_cache=False)
    # The logit at position t predicts token t + 1: responses are predicted from P - 1 .. P + R - 2.
    logits = out.logits[:, p_len - 1:-1, :].float() / temperature
    log_p = F.log_softmax(logits, dim=-1)
    targets = input_ids[:, p_len:]
    logprobs = log_p.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    entropy = -(log_p.exp() * log_p).sum(-1)
    zero = torch.zeros((), device=device, dtype=logprobs.dtype)
    return torch.where(mask, logprobs, zero), torch.where(mask, entropy, zero), mask
