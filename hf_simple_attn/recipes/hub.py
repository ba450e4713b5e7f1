"""Upload a finished checkpoint (weights, config, modeling code, tokenizer, card, results) to the Hub.

`push_checkpoint` only reads `output_dir`: whatever fails (no token, no network, a refused
repository), the local checkpoint stays as it is, and the error says so and how to push it again
(`hf-simple-attn push RUN_DIR REPO_ID`, which calls `push_checkpoint` too). Intermediate training states
(`checkpoint-*`, `step_*`, `epoch_*` folders, optimizer states) and the pickled `training_args.bin` are not
uploaded: `files_to_push` lists exactly what is committed. The card is committed as it reads for the repository
(`card_for_repository`), so that a card written for a local folder names the repository once pushed.
The scripts in `training/` keep the Hub token out of their saved arguments and pass it here.
"""

import logging
import shlex
from pathlib import Path

from huggingface_hub import CommitOperationAdd, HfApi

from .model_card import CARD_NAME, DEFAULT_LICENSE, card_for_repository, write_model_card


logger = logging.getLogger(__name__)


DEFAULT_COMMIT_MESSAGE = "Upload hf_simple_attn checkpoint"
# Top-level files that belong to a training run (its resumable state and arguments), not to the model.
TRAINING_STATE_FILES = ("optimizer.pt", "scheduler.pt", "scaler.pt", "rng_state.pth", "training_args.bin")


def files_to_push(output_dir) -> list[str]:
    """Names of the files `push_checkpoint` uploads: the top-level files of `output_dir`, sorted.

    Subfolders (intermediate checkpoints, logs), hidden files, the training arguments and resumable
    training state (optimizer, scheduler, random-number states) stay local.
    """
    folder = Path(output_dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"output_dir: {folder} is not a folder")
    return sorted(
        path.name
        for path in folder.iterdir()
        if path.is_file()
        and not path.name.startswith(".")
        and path.name not in TRAINING_STATE_FILES
        and not (path.name.startswith("rng_state") and path.suffix == ".pth")
    )


def push_command(output_dir, repo_id: str, private: bool = False, revision: str | None = None) -> str:
    """The `hf-simple-attn push` command line that pushes `output_dir` to `repo_id`."""
    options = (["--private"] if private else []) + (["--revision", revision] if revision else [])
    return shlex.join(["hf-simple-attn", "push", str(output_dir), repo_id, *options])


def commit_operations(folder: Path, files: list[str], repo_id: str) -> list[CommitOperationAdd]:
    """One addition per file; the card as it reads in `repo_id`, the other files as they are on disk."""
    operations = []
    for name in files:
        content = str(folder / name)
        if name == CARD_NAME:
            content = card_for_repository((folder / name).read_text(encoding="utf-8"), repo_id).encode()
        operations.append(CommitOperationAdd(path_in_repo=name, path_or_fileobj=content))
    return operations


def push_checkpoint(
    output_dir,
    repo_id: str,
    *,
    token=None,
    private: bool = False,
    revision: str | None = None,
    commit_message: str = DEFAULT_COMMIT_MESSAGE,
) -> str:
    """Create (or reuse) the model repository `repo_id` and commit `files_to_push(output_dir)` to its `revision`
    (a branch, created from `main` if missing; default `main`).

    Returns the URL of the commit. `repo_id` may omit the namespace (the token's user is used); `token` defaults to
    `HF_TOKEN` or the `hf auth login` one. Any failure raises `RuntimeError` naming the step that failed and the
    command that pushes the folder again; local files are never changed.
    """
    folder = Path(output_dir)
    files = files_to_push(folder)
    if "config.json" not in files:
        raise RuntimeError(f"Not pushing {folder}: it has no config.json, so it is not a saved checkpoint")
    api = HfApi(token=token)
    step = f"creating the repository {repo_id!r}"
    try:
        repo_id = api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model").repo_id
        if revision is not None:
            step = f"creating the branch {revision!r} of {repo_id!r}"
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        step = f"uploading {len(files)} files to {repo_id!r}"
        commit = api.create_commit(
            repo_id,
            operations=commit_operations(folder, files, repo_id),
            commit_message=commit_message,
            revision=revision,
        )
    except Exception as error:  # network, authentication, permissions, a refused card: all reported the same way
        raise RuntimeError(
            f"Pushing to the Hub failed while {step}: {type(error).__name__}: {error}\n"
            f"The local checkpoint at {folder} is intact; once the problem is fixed, push it again with "
            f"`{push_command(folder, repo_id, private, revision)}` (the token from HF_TOKEN or `hf auth login`)."
        ) from error
    return str(commit.commit_url)


def repository_id(output_dir, hub_model_id: str | None) -> str:
    """`--hub_model_id`, or by default the output folder's name."""
    return hub_model_id or Path(output_dir).resolve().name


def prepare_push(output_dir, hub_model_id: str | None, *, token=None, private: bool = False) -> str:
    """Start of a training script with `--push_to_hub`: create (or reuse) the repository before any training, so
    that a missing token, a refused name or no network stops the script at once instead of after training.

    Returns the repository id (with its namespace); raises `SystemExit` naming the repository and the error.
    """
    repo_id = repository_id(output_dir, hub_model_id)
    try:
        repo_url = HfApi(token=token).create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
    except Exception as error:  # network, authentication, permissions: all reported the same way
        raise SystemExit(
            f"--push_to_hub: cannot create the repository {repo_id!r} ({type(error).__name__}: {error}); nothing "
            "was trained. Fix the token (--hub_token or `hf auth login`) or --hub_model_id, or leave out --push_to_hub."
        ) from error
    return repo_url.repo_id


def publish_checkpoint(
    output_dir,
    model,
    *,
    push_to_hub: bool,
    hub_model_id: str | None = None,
    hub_token=None,
    hub_private_repo: bool = False,
    license: str = DEFAULT_LICENSE,
    **card_fields,
) -> Path:
    """End of a training script: write the model card, then push the folder when asked.

    `license` is the model's licence in the card (a Hub licence id; default apache-2.0, the code's; the
    card names the training data's licence separately). `card_fields` go to `write_model_card` (task,
    dataset_name, metrics, ...). The repository is
    `hub_model_id`, or the folder's name. A failed upload stops the script with `SystemExit`
    naming the failed step; the checkpoint and its card stay on disk. Returns the card's path.
    """
    repo_id = repository_id(output_dir, hub_model_id)
    card = write_model_card(
        output_dir, model, model_id=repo_id if push_to_hub else None, license=license, **card_fields
    )
    logger.info("Model card written to %s", card)
    if push_to_hub:
        try:
            url = push_checkpoint(output_dir, repo_id, token=hub_token, private=bool(hub_private_repo))
        except RuntimeError as error:
            raise SystemExit(f"--push_to_hub: {error}") from error
        logger.info("Pushed to the Hub: %s", url)
    return card


__all__ = ["files_to_push", "prepare_push", "publish_checkpoint", "push_checkpoint", "push_command"]
