"""Judging reports against baselines and budgets (``memscope check``), comparing reports and variants, and reading the configuration."""
