import torch, time, random
from acesql_lib.models import load_tokenizer, build_tiny_model
from acesql_lib.datasets import load_synsql, schemas_for
from acesql_lib.tinyworld import TinyWorld
from acesql_lib.tinybase import gold_samples
from pathlib import Path
def encode(tok, smp):
    p = tok.apply_chat_template(smp["prompt"], tokenize=False, add_generation_prompt=True)
    full = tok.apply_chat_template(smp["prompt"] + smp["completion"], tokenize=False)
    ids = tok(full, add_special_tokens=False).input_ids; n = len(tok(p, add_special_tokens=False).input_ids)
    return ids, n
def plain():
    torch.manual_seed(0); random.seed(0)
    tok = load_tokenizer("/tmp/cal_c/models/base")
    m = build_tiny_model(tok, 128, 2, 4, 2, 256, 2048, 0)
    w = TinyWorld(Path("data/tinyworld"))
    ex = load_synsql(w.train_json, w.train_db_root).examples
    s, _ = gold_samples(ex, schemas_for(ex, 0), "tiny")
    gen = [encode(tok, x) for x in s[1::2]]  # generator samples only (short)
    train, held = gen[:-50], gen[-50:]
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    def batch(items):
        L = max(len(i) for i, _ in items)
        ids = torch.full((len(items), L), tok.pad_token_id); lab = torch.full((len(items), L), -100); am = torch.zeros((len(items), L), dtype=torch.long)
        for k, (i, n) in enumerate(items):
            ids[k, :len(i)] = torch.tensor(i); am[k, :len(i)] = 1; lab[k, n:len(i)] = torch.tensor(i[n:])
        return ids, am, lab
    t = time.time()
    for step in range(301):
        ids, am, lab = batch(random.sample(train, 16))
        loss = m(input_ids=ids, attention_mask=am, labels=lab).loss
        loss.backward(); torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0); opt.step(); opt.zero_grad()
        if step % 50 == 0:
            with torch.no_grad():
                ids, am, lab = batch(held[:32]); lg = m(input_ids=ids, attention_mask=am).logits
                pred = lg[:, :-1].argmax(-1); tgt = lab[:, 1:]; mask = tgt != -100
                acc = ((pred == tgt) & mask).sum().item() / mask.sum().item()
            print(step, round(loss.item(), 3), "held acc", round(acc, 3), round(time.time() - t), flush=True)

def trl_variant(group_by_length, sched):
    import dataclasses
    from acesql_lib.config import load_config
    from acesql_lib.sft import train_sft
    torch.manual_seed(0); random.seed(0)
    tok = load_tokenizer("/tmp/cal_c/models/base")
    m = build_tiny_model(tok, 128, 2, 4, 2, 256, 2048, 0)
    w = TinyWorld(Path("data/tinyworld"))
    ex = load_synsql(w.train_json, w.train_db_root).examples
    s, _ = gold_samples(ex, schemas_for(ex, 0), "tiny")
    gens = s[1::2]
    held = [encode(tok, x) for x in gens[-50:]]
    cfg = dataclasses.replace(load_config("tiny").sft, learning_rate=3e-3, per_device_batch_size=16, lr_scheduler_type=sched,
                              warmup_ratio=0.0, logging_steps=50, save_steps=0)
    train_sft(m, tok, gens[:-50], cfg, "/tmp/probe_trl", max_steps=300, seed=0, group_by_length=group_by_length)
    m.eval()
    L = max(len(i) for i, _ in held[:32])
    ids = torch.full((32, L), tok.pad_token_id); am = torch.zeros((32, L), dtype=torch.long); lab = torch.full((32, L), -100)
    for k, (i, n) in enumerate(held[:32]):
        ids[k, :len(i)] = torch.tensor(i); am[k, :len(i)] = 1; lab[k, n:len(i)] = torch.tensor(i[n:])
    with torch.no_grad():
        pred = m(input_ids=ids, attention_mask=am).logits[:, :-1].argmax(-1)
    tgt = lab[:, 1:]; mask = tgt != -100
    print("TRL", group_by_length, sched, "held acc", ((pred == tgt) & mask).sum().item() / mask.sum().item(), flush=True)

if __name__ == "__main__":
    import sys
    trl_variant(sys.argv[1] == "1", sys.argv[2])
