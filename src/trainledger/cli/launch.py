"""Launch text for a layout of `trainledger layout`: the torchrun line and the Slurm script that run it with
`trainledger train`. Pure string building from the layout record; nothing here runs or imports torch.

A layout (account/planning/layout.py) maps onto train's flags one to one where the trainer implements the part:
tp -> --tp, sp -> --sp, pp -> --pp, dp > 1 with ZeRO 0 -> --parallel ddp, with ZeRO 3 -> --parallel fsdp
(FSDP2 fully_shard), the micro-batch -> --batch-size, the global batch -> --global-batch-size (train derives
--grad-accum = global / (micro × dp)), full recomputation -> --recompute full, and --seq-len, --precision,
--optimizer, --compile as searched. The parts train does not implement (context parallelism, interleaved 1F1B,
ZeRO-1/2, selective recomputation, --tp with --pp, ...)
are named in comment lines and the command is left commented out, instead of a command that fails or runs
another layout. train/distributed.py check_layout and train/config.py validate are the rules mirrored here.

The training settings (--lr, --min-lr, --warmup-steps, --steps, --checkpoint-every) come with the launch, each
default with its source in the header (account/planning/launch_settings.py: the model's published recipe, Chinchilla's
tokens, Daly's checkpoint interval). The layout is the one picked (--rank N or a --config candidate: cli/launch_args.py)
or the fastest train runs; where train cannot run the one asked for, the first comment line says why and which
layout, the nearest train runs, the text launches instead.

Placeholders are shell variables the text names in its comments: NODE_RANK and MASTER_ADDR (torchrun text: set on
the command line that runs the file on each node; the Slurm script derives the rendezvous from the allocation),
RUN_DIR (the --out-dir, on storage every node mounts) and DATA (a token file of `trainledger tokenize`, likewise
shared). The Slurm script asks for --time, --cpus-per-task, --output/--error, and has one environment line to set
once (a virtualenv's PATH, or `module load`) and the NCCL settings to check, commented.

The texts are bash, to be saved to a file and run (`bash launch.sh`, `sbatch job.sbatch`; docs/train.md). Nothing
a user named (a config.json's path, the directory it is in) appears outside the quoted --model argument: the
comments name a preset by its name and any other model as "the --model config.json", the Slurm job name is a
preset's name or `trainledger-config`, and every argument is quoted by `shell_word`, which writes a word with a
newline or another control character in bash's $'...' form, so no line of the text can be ended, in a comment
or a command, by a character of a path (`a⏎touch PWNED #` ran `touch` from the comment of an earlier version).
"""

from __future__ import annotations

import shlex

from trainledger import units
from trainledger.account.planning.launch_settings import slurm_time
from trainledger.errors import TrainledgerError
from trainledger.train.config import OPTIMIZERS as TRAIN_OPTIMIZERS, PRECISIONS as TRAIN_PRECISIONS

KINDS = ("torchrun", "slurm")
RDZV_PORT = 29500           # torchrun's default --master-port, the port Slurm examples of PyTorch use
MAX_RESTARTS = 3            # elastic restarts of the workers before the job fails (each resumes the last checkpoint)
PRECISION_ALTERNATIVE = "amp-{}"    # what train runs instead of mixed-* under FSDP, TP or PP (train/config.py)
# The environment of the c10d agents: workers restarted after a failure bootstrap on a fresh store. By default
# torchrun's c10d rendezvous shares one TCPStore, created at the first round, with the workers, and a restarted
# worker may read a peer's address of the previous round from it (connection refused; pytorch/pytorch#135712;
# seen here in one of the first two FSDP restarts of tests/train/test_multinode.py under torch 2.13).
C10D_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
VENV_DEFAULT = "$HOME/venvs/trainledger"    # the virtualenv the Slurm script puts first on PATH unless TRAINLEDGER_VENV
NCCL_LINES = (      # commented: NCCL picks an interface and the adapters itself; users are told to check both
    "# NCCL between nodes: check these with your cluster's documentation (unset, NCCL picks them itself):",
    "# export NCCL_SOCKET_IFNAME=ib0   # the IP interface NCCL bootstraps over (and sends on without InfiniBand); "
    "`ip -br addr` lists them, ^lo,docker excludes",
    "# export NCCL_IB_HCA=mlx5         # the InfiniBand/RoCE adapters (HCAs) NCCL sends on, by name prefix; "
    "`ibv_devinfo` lists them",
    "# export NCCL_DEBUG=INFO          # NCCL logs the interface and transport it chose: check them on the first run",
)


def _is_preset(model: str) -> bool:
    from trainledger.specs import PRESET_ALIASES, PRESETS
    return str(model).strip().lower() in PRESETS or str(model).strip().lower() in PRESET_ALIASES


def nodes_of(num_gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """(nodes, processes per node): full nodes of `gpus_per_node`, or one node when the job is smaller.

    A job that does not fill whole nodes evenly (12 GPUs on 8-GPU nodes) takes ceil(n / g) nodes with n / nodes
    processes each when that divides, else (0, 0): torchrun starts the same number of processes on every node."""
    if num_gpus <= gpus_per_node:
        return 1, num_gpus
    nodes = -(-num_gpus // gpus_per_node)
    return (nodes, num_gpus // nodes) if num_gpus % nodes == 0 else (0, 0)


def unsupported(layout: dict, precision: str, optimizer: str, nodes: int) -> list[str]:
    """Why `trainledger train` cannot run `layout` as searched: one reason per part, empty when it can."""
    tp, pp, dp, zero = layout["tp"], layout["pp"], layout["dp"], layout["zero"]
    reasons = []
    if nodes == 0:
        reasons.append("the GPUs do not split evenly over nodes (torchrun starts as many processes on each node); "
                       "give --num-gpus a multiple of --gpus-per-node")
    if layout["cp"] > 1:
        reasons.append(f"context parallelism (cp {layout['cp']}): train has no --cp")
    if layout["interleave"] > 1:
        reasons.append(f"an interleaved pipeline ({layout['interleave']} chunks per GPU): train's --pp runs plain 1F1B "
                       "(train/pipeline.py)")
    if zero in (1, 2):
        reasons.append(f"ZeRO-{zero}: train replicates (--parallel ddp, ZeRO-0) or fully shards (--parallel fsdp, "
                       "ZeRO-3)")
    if layout["recompute"] not in ("none", "full"):
        reasons.append(f"{layout['recompute']} recomputation: train recomputes whole blocks (--recompute full) or "
                       "nothing, so its activations would not be this layout's")
    if tp > 1 and pp > 1:
        reasons.append("--tp with --pp: train runs one of them at a time")
    if dp > 1 and zero == 0 and (tp > 1 or pp > 1):
        reasons.append(f"{'--tp' if tp > 1 else '--pp'} with {dp} data-parallel replicas: train needs --parallel fsdp "
                       "(ZeRO-3) there, this layout is ZeRO-0")
    micro_batches = layout["global_batch_size"] // (layout["batch_size"] * dp)
    if pp > 1 and micro_batches < pp:
        reasons.append(f"--pp {pp} with {micro_batches} micro-batch(es) per step: train's 1F1B needs at least {pp}")
    if precision not in TRAIN_PRECISIONS:
        reasons.append(f"--precision {precision}: train runs {', '.join(TRAIN_PRECISIONS)}")
    elif precision.startswith("fp8-") and (zero == 3 or tp > 1 or pp > 1):
        reasons.append(f"--precision {precision} with FSDP, --tp or --pp: train runs FP8 on one process or with "
                       "--parallel ddp (train/fp8.py)")
    elif precision.startswith("mixed-") and (zero == 3 or tp > 1 or pp > 1):
        reasons.append(f"--precision {precision} with FSDP, --tp or --pp: train runs "
                       f"{PRECISION_ALTERNATIVE.format(precision[6:])} there (train/config.py)")
    if optimizer not in TRAIN_OPTIMIZERS:
        reasons.append(f"--optimizer {optimizer}: train runs {', '.join(TRAIN_OPTIMIZERS)}")
    return reasons


def number(value: float) -> str:
    """A learning rate as a flag's word: 4 significant digits (1.5e-06, 0.00015)."""
    return f"{value:.4g}"


def train_flags(layout: dict, *, model: str, seq_len: int, precision: str, optimizer: str,
                compile_model: bool = False, settings: dict | None = None) -> list[str]:
    """The `trainledger train` arguments of `layout` and the training `settings` (account/planning/launch_settings.py;
    None: train's own defaults), before the data and output placeholders."""
    flags = ["--model", model]
    if layout["dp"] > 1:
        flags += ["--parallel", "fsdp" if layout["zero"] == 3 else "ddp"]
    if layout["tp"] > 1:
        flags += ["--tp", str(layout["tp"])] + (["--sp"] if layout["sp"] else [])
    if layout["pp"] > 1:
        flags += ["--pp", str(layout["pp"])]
    flags += ["--batch-size", str(layout["batch_size"]), "--global-batch-size", str(layout["global_batch_size"]),
              "--seq-len", str(seq_len), "--precision", precision, "--optimizer", optimizer]
    if layout["recompute"] == "full":
        flags += ["--recompute", "full"]
    if compile_model:
        flags.append("--compile")
    if settings is not None:
        flags += ["--lr", number(settings["lr"]), "--min-lr", number(settings["min_lr"]), "--warmup-steps",
                  str(settings["warmup_steps"]), "--steps", str(settings["steps"]), "--checkpoint-every",
                  str(settings["checkpoint_every"])]
    return flags


def shell_word(word: str) -> str:
    """`word` as one bash word that stays on its line: shlex.quote's single quotes when every character is printable,
    else bash's ANSI-C form $'...' with every control or unprintable character escaped (a newline written \\x0a,
    U+2028 \\u2028, a byte of a non-UTF-8 file name, kept by Python's surrogateescape, \\xHH), and backslashes and
    single quotes escaped. Inside single quotes or $'...' nothing expands: $(...), backticks, ;."""
    if word.isprintable():
        return shlex.quote(word)
    out = []
    for char in word:
        code = ord(char)
        if char in "\\'":
            out.append("\\" + char)
        elif 0xDC80 <= code <= 0xDCFF:            # os.fsdecode's stand-in for the byte code - 0xDC00
            out.append(f"\\x{code - 0xDC00:02x}")
        elif char.isprintable():
            out.append(char)
        elif code < 0x100:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return "$'" + "".join(out) + "'"


def comment_text(text: str) -> str:
    """`text` with every character that is not printable (a newline, a carriage return, U+2028, ...) replaced by '?',
    for a comment line that must stay one line."""
    return "".join(char if char.isprintable() else "?" for char in text)


def _command(flags: list[str]) -> str:
    """train's arguments quoted for a shell; the placeholders stay expandable ("$DATA")."""
    model_and_layout = " ".join(shell_word(f) for f in flags)
    return (f"-m trainledger.cli.main train {model_and_layout} "
            '--data "$DATA" --out-dir "$RUN_DIR" --resume')


def parts_of(layout: dict) -> str:
    """'tp 8 (sp), pp 1, interleave 1, cp 1, dp 8, ZeRO 3, micro-batch 1, recompute none'."""
    return (f"tp {layout['tp']}{' (sp)' if layout['sp'] else ''}, pp {layout['pp']}, interleave "
            f"{layout['interleave']}, cp {layout['cp']}, dp {layout['dp']}, ZeRO {layout['zero']}, micro-batch "
            f"{layout['batch_size']}, recompute {layout['recompute']}")


def _header(layout: dict, rank: int, title: str, reasons: list[str]) -> list[str]:
    lines = [f"# layout #{rank} of {title}: {parts_of(layout)}; predicted "
             f"{units.format_seconds(layout['step_seconds'])} per step, MFU {100 * layout['mfu']:.1f}%"]
    if reasons:
        lines.append("# trainledger train cannot run this layout, so the command below is commented out:")
        lines += [f"#   - {reason}" for reason in reasons]
    return [comment_text(line) for line in lines]


def settings_lines(settings: dict | None, num_gpus: int, slurm: bool) -> list[str]:
    """The header's training settings: each flag's value and where its default comes from (its source)."""
    if settings is None:
        return []
    src = settings["sources"]
    tokens = settings["tokens"]
    lines = [
        "# training settings (each a flag of `trainledger layout --launch`, which prints them again; docs/train.md):",
        f"#   --lr {number(settings['lr'])}: {src['lr']}",
        f"#   --min-lr {number(settings['min_lr'])}: {src['min_lr']}",
        f"#   --warmup-steps {settings['warmup_steps']}: {src['warmup_steps']}",
        f"#   --steps {settings['steps']} = {units.format_count(tokens)} tokens of {settings['tokens_per_step']:,} "
        f"per step: {src['steps']}",
        f"#   --checkpoint-every {settings['checkpoint_every']}: {src['checkpoint_every']}",
        f"#   predicted run: {units.format_seconds(settings['run_seconds'])} on {num_gpus} GPUs"
        + (f", up to {units.format_seconds(settings['run_seconds_high'])} at the error bar's high end"
           if settings["run_seconds_high"] > settings["run_seconds"] else "")
        + f"; {settings['recipe']}'s lr was tuned at a batch of {units.format_count(settings['recipe_batch_tokens'])} "
          f"tokens, this run's is {settings['tokens_per_step']:,} (not rescaled)",
    ]
    if slurm:
        lines += [f"#   --time {slurm_time(settings['time_seconds'])}: {src['time']}; a partition may cap a job's "
                  "time (sinfo -o '%P %l'): then give --time its cap and submit again until done, each start resumes "
                  "from the last checkpoint"]
    return [comment_text(line) for line in lines]


def torchrun_text(layout: dict, rank: int, title: str, flags: list[str], nodes: int, per_node: int,
                  reasons: list[str], settings: dict | None = None) -> str:
    """Comment lines and the one torchrun line to start on each node by hand (static rendezvous on node 0)."""
    lines = _header(layout, rank, title, reasons) + settings_lines(settings, nodes * per_node, slurm=False) + [
        f"# on each of the {nodes} node(s), set NODE_RANK and MASTER_ADDR in one place, the command line that runs "
        "this file: NODE_RANK=0 MASTER_ADDR=<node 0's address> DATA=... RUN_DIR=... bash launch.sh on node 0, "
        "NODE_RANK=1, 2, ... on the others",
        '# (inside a Slurm allocation, `srun` per node: NODE_RANK=$SLURM_NODEID, MASTER_ADDR=$(scontrol show hostnames '
        '"$SLURM_JOB_NODELIST" | head -n 1); or print the sbatch script: --launch slurm)',
        "# RUN_DIR (checkpoints, metrics, token cache, lock) and DATA on storage every node mounts (docs/train.md)",
        *NCCL_LINES,
    ]
    command = (f'torchrun --nnodes {nodes} --nproc-per-node {per_node} --node-rank "$NODE_RANK" --rdzv-backend static '
               f'--rdzv-endpoint "$MASTER_ADDR:{RDZV_PORT}" {_command(flags)}')
    lines.append(("# " if reasons else "") + command)
    return "\n".join(lines) + "\n"


def slurm_text(layout: dict, rank: int, title: str, flags: list[str], nodes: int, per_node: int,
               reasons: list[str], job_name: str, settings: dict | None = None, cpus_per_task: int | None = None) -> str:
    """An sbatch script: one torchrun agent per node (srun), c10d rendezvous on the first node, elastic restarts
    that resume from the last checkpoint; --time from `settings`, --cpus-per-task, --output/--error by job name and
    id, the environment to set once, the NCCL settings to check."""
    from trainledger.cli.launch_args import CPUS_PER_GPU
    off = "# " if reasons else ""
    cpus = cpus_per_task or CPUS_PER_GPU * max(per_node, 1)
    lines = ["#!/bin/bash", *_header(layout, rank, title, reasons),
             *settings_lines(settings, nodes * per_node, slurm=True),
             f"# --cpus-per-task {cpus}: the cores of each node's one task, torchrun and its {max(per_node, 1)} "
             "workers (recent Slurm gives a task one core unless asked)",
             f"#SBATCH --job-name={job_name}",
             f"#SBATCH --nodes={max(nodes, 1)}",
             "#SBATCH --ntasks-per-node=1",
             f"#SBATCH --gpus-per-node={max(per_node, 1)}",
             f"#SBATCH --cpus-per-task={cpus}",
             *([f"#SBATCH --time={slurm_time(settings['time_seconds'])}"] if settings is not None else []),
             "#SBATCH --output=%x-%j.out",
             "#SBATCH --error=%x-%j.err",
             "#SBATCH --exclusive",
             "# >>> SET ONCE for your cluster: the Python environment with trainledger and torch, on every node <<<",
             f"# a virtualenv: its bin/ first on PATH (TRAINLEDGER_VENV=/path/to/venv sbatch ..., default {VENV_DEFAULT});",
             "# or, with environment modules instead, replace the two lines below by e.g. `module load python cuda`",
             f'export TRAINLEDGER_VENV="${{TRAINLEDGER_VENV:-{VENV_DEFAULT}}}"',
             'export PATH="$TRAINLEDGER_VENV/bin:$PATH"',
             *NCCL_LINES,
             "# RUN_DIR (checkpoints, metrics, token cache, lock) and DATA on storage every node mounts (docs/train.md)",
             'export RUN_DIR="${RUN_DIR:-$SLURM_SUBMIT_DIR/runs/$SLURM_JOB_NAME}"',
             ': "${DATA:?set DATA to a token file (trainledger tokenize) on storage every node mounts}"',
             "# restarted workers bootstrap on a fresh store, not the previous round's (pytorch/pytorch#135712)",
             *(f"export {name}={value}" for name, value in C10D_ENV.items()),
             "# srun's task gets the --cpus-per-task above (since Slurm 22.05 srun does not inherit sbatch's)",
             'export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"',
             "# c10d rendezvous at the first node of the allocation: torchrun numbers the nodes itself (no NODE_RANK "
             "or MASTER_ADDR to set)",
             f'{off}head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
             f'{off}srun torchrun --nnodes {nodes} --nproc-per-node {per_node} --rdzv-id "$SLURM_JOB_ID" '
             f'--rdzv-backend c10d --rdzv-endpoint "$head_node:{RDZV_PORT}" --max-restarts {MAX_RESTARTS} '
             + _command(flags)]
    return "\n".join(lines) + "\n"


def nearest_runnable(count: int, asked: int, runnable) -> int | None:
    """The rank (1-based) of the layout train runs nearest to `asked` among `count` ranked layouts: the asked one when
    `runnable(rank)`, else the runnable one fewest places away (of two, the faster); None when none is."""
    if runnable(asked):
        return asked
    for distance in range(1, count):
        for rank in (asked - distance, asked + distance):
            if 1 <= rank <= count and runnable(rank):
                return rank
    return None


def _skipped_lines(ranked: list[dict], asked: int, rank: int, reasons_of) -> list[str]:
    """The comment lines that say, first line complete on its own, why layout #`asked` is not launched and which
    layout is instead."""
    instead = ranked[rank - 1]
    why = reasons_of(ranked[asked - 1])
    head = ("the fastest layout, #1," if asked == 1 else f"layout #{asked} (--rank {asked})")
    lines = [f"# {head} needs what trainledger train does not implement: {'; '.join(why)}; this runs #{rank} "
             f"instead, the nearest layout train runs: {parts_of(instead)}, "
             f"{units.format_seconds(instead['step_seconds'])} per step "
             f"(#{asked}: {units.format_seconds(ranked[asked - 1]['step_seconds'])})",
             *(f"#   - {reason}" for reason in why)]
    if asked == 1 and rank > 1:
        others = ("" if rank == 2 else "#2 likewise needs parts train lacks; " if rank == 3
                  else f"#2-#{rank - 1} likewise need parts train lacks; ")
        lines.append(f"# {others}so this runs #{rank}, the fastest layout of the search that train runs")
    return [comment_text(line) for line in lines]


def launch_texts(result: dict, ranked: list[dict], *, model: str, gpus_per_node: int, compile_model: bool = False,
                 rank: int | None = None, settings_of=None, cpus_per_task: int | None = None) -> dict:
    """{"layout": rank, "asked", "runnable", "nodes", "processes_per_node", "train_args", "settings", "note",
    "torchrun", "slurm"} for layout #`rank` of `ranked` (every layout the search timed, fastest first; at least one;
    default 1) when train can run it, else for the nearest one train runs (`note`: the line that says so), else for
    #`rank` with its reasons and the command commented out. `result` is the layout command's answer (model, gpu,
    num_gpus, global_batch_size, seq_len, precision, optimizer); `settings_of(rank)` the training settings of a
    layout (account.planning.launch_settings.settings; None: train's defaults, no --time)."""
    nodes, per_node = nodes_of(result["num_gpus"], gpus_per_node)
    asked = rank or 1
    if not 1 <= asked <= len(ranked):
        raise TrainledgerError(f"--rank {asked}: the search timed {len(ranked)} layout(s) that fit; allowed "
                               f"1..{len(ranked)}", "--rank")

    def reasons_of(layout):
        return unsupported({**layout, "global_batch_size": result["global_batch_size"]}, result["precision"],
                           result["optimizer"], nodes)

    chosen = nearest_runnable(len(ranked), asked, lambda r: not reasons_of(ranked[r - 1]))
    rank = asked if chosen is None else chosen
    layout = {**ranked[rank - 1], "global_batch_size": result["global_batch_size"]}
    reasons = reasons_of(layout)
    settings = settings_of(rank) if settings_of is not None else None
    flags = train_flags(layout, model=model, seq_len=result["seq_len"], precision=result["precision"],
                        optimizer=result["optimizer"], compile_model=compile_model, settings=settings)
    preset = _is_preset(model)              # a user's path or directory name stays inside the quoted --model only
    title = f"{result['model'] if preset else 'the --model config.json'} on {result['num_gpus']} × {result['gpu']}"
    job_name = "trainledger-" + ("".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "-"
                                         for c in result["model"])[:40] if preset else "config")
    torchrun = torchrun_text(layout, rank, title, flags, nodes, per_node, reasons, settings)
    slurm = slurm_text(layout, rank, title, flags, nodes, per_node, reasons, job_name, settings, cpus_per_task)
    note = None
    if rank != asked:        # say first, in one line, why the asked one is not launched and which is
        skipped = _skipped_lines(ranked, asked, rank, reasons_of)
        note = skipped[0][2:]
        torchrun = "\n".join(skipped) + "\n" + torchrun
        slurm = slurm.replace("#!/bin/bash\n", "#!/bin/bash\n" + "\n".join(skipped) + "\n", 1)
    return {"layout": rank, "asked": asked, "runnable": not reasons, "nodes": nodes, "processes_per_node": per_node,
            "train_args": flags, "settings": settings, "note": note, "torchrun": torchrun, "slurm": slurm}
