"""Drafter training shared by the methods: offline data and fit, losses, the capture from the policy trainer's
forward, the online trainer and its health alarm."""
