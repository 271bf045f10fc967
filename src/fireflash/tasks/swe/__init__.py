"""SWE tasks from real PyPI packages by procedural mutation (issue 30; see README.md in this folder).

    fireflash tasks generate swe --packages toolz,inflection --seed 0 --out runs/swe --max-per-package 20
"""
