"""Word pools for made-up file, script and directory names.

Used by generated task families (``families/``: random names per instance) and by SFT's path-renaming
augmentation (``fireflash.sft.augment``: renamed copies of a task). They live here, in tasks, so that sft
imports tasks and never the reverse (issue 28).
"""

# Pools are disjoint; none is a Python keyword, builtin or stdlib module (tests/sft/test_augment.py).
FILE_STEMS = (
    "memo", "journal", "ledger", "records", "entries", "report", "summary", "digest", "tally", "results",
    "draft", "listing", "sample", "batch", "export", "snapshot", "catalog", "roster", "agenda", "manifest",
    "overview", "events", "metrics", "figures", "totals", "readings", "history", "inputs", "daily_report",
    "raw_input", "weekly_totals", "user_list", "run_output", "final_result", "audit_trail", "field_log",
    "march_data", "backlog", "minutes", "register", "feed", "extract", "dataset", "tracker", "inbox_dump",
)
SCRIPT_STEMS = (
    "runner", "process", "convert", "summarize", "analyze", "compute", "helper", "worker", "handler",
    "checker", "tool", "utils", "do_work", "run_job", "transform", "reporter", "counter", "parser_util",
    "formatter", "cleaner", "collector", "loader", "builder", "scanner",
)
DIR_WORDS = (
    "billing", "service", "storage", "work", "vault", "staging", "shared", "incoming", "assets", "reports",
    "jobs", "workspace", "notebook", "archive", "warehouse", "depot", "studio", "backend", "portal",
    "uploads", "outbox", "pipeline", "toolkit", "corelib", "engine", "hub", "kit", "lab", "orders",
    "mailroom",
)
