"""Published Crafter scores: anchors for orientation, never measured here and never
mixed with measured figures (BENCHMARKS.md lists them in a table of their own)."""

from __future__ import annotations

from typing import Any

PUBLISHED: tuple[dict[str, Any], ...] = (
    {
        "method": "PPO",
        "score": 4.6,
        "source": "Hafner 2021, *Benchmarking the Spectrum of Agent Capabilities* "
        "(ICLR 2022, arXiv:2109.06780)",
    },
    {
        "method": "DreamerV3",
        "score": 14.5,
        "source": "Hafner et al. 2023, *Mastering Diverse Domains through World Models* "
        "(arXiv:2301.04104)",
    },
    {
        "method": "Achievement Distillation",
        "score": 21.8,
        "source": "Moon et al. 2023, *Discovering Hierarchical Achievements in Reinforcement "
        "Learning via Contrastive Learning* (NeurIPS 2023, arXiv:2307.03486)",
    },
    {
        "method": "SPRING (GPT-4)",
        "score": 27.3,
        "source": "Wu et al. 2023, *SPRING: Studying the Paper and Reasoning to Play Games* "
        "(NeurIPS 2023, arXiv:2305.15486)",
    },
    {
        "method": "Human experts",
        "score": 50.5,
        "source": "Hafner 2021, *Benchmarking the Spectrum of Agent Capabilities* "
        "(ICLR 2022, arXiv:2109.06780)",
    },
)
"""Published Crafter scores (%): anchors, never measured here."""
