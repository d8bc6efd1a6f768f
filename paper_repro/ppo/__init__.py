"""The PPO end-to-end ("Amdahl") experiment: `python -m paper_repro.ppo` (see `__main__`)."""
