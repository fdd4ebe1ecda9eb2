"""Shared by the examples: Adam on numpy arrays, piecewise-linear control knots, the control
panel of their plots, and angle wrapping."""

from __future__ import annotations

import numpy as np


def interpolation(steps: int, knots: int) -> np.ndarray:
    """B (steps, knots): ctrl = B @ u linearly interpolates knots spread evenly over the
    horizon (knots == steps gives the identity, one free control row per step)"""
    if knots >= steps:
        return np.eye(steps)
    s = np.arange(steps) * (knots - 1) / (steps - 1)
    i = np.minimum(np.floor(s).astype(int), knots - 2)
    w = s - i
    B = np.zeros((steps, knots))
    B[np.arange(steps), i] = 1 - w
    B[np.arange(steps), i + 1] = w
    return B


class Adam:
    """Adam (Kingma and Ba 2015) on one numpy array"""

    def __init__(self, lr: float, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8):
        self.lr, self.beta1, self.beta2, self.eps = lr, beta1, beta2, eps
        self.m = self.v = None
        self.t = 0

    def step(self, x: np.ndarray, grad: np.ndarray) -> np.ndarray:
        if self.m is None:
            self.m, self.v = np.zeros_like(x), np.zeros_like(x)
        self.t += 1
        self.m = self.beta1 * self.m + (1 - self.beta1) * grad
        self.v = self.beta2 * self.v + (1 - self.beta2) * grad * grad
        m = self.m / (1 - self.beta1**self.t)
        v = self.v / (1 - self.beta2**self.t)
        return x - self.lr * m / (np.sqrt(v) + self.eps)


def plot_controls(ax, t, ctrl, ctrl_init, names) -> None:
    """the optimised controls (solid) over the initial ones (dotted) against time t"""
    for j, name in enumerate(names):
        (line,) = ax.plot(t, ctrl[:, j], label=name)
        ax.plot(t, ctrl_init[:, j], ":", color=line.get_color())
    ax.set(xlabel="t (s)", ylabel="ctrl", ylim=(-1.05, 1.05), title="controls (dotted: initial)")
    ax.legend(fontsize=8)


def wrap(angle):
    """angles into [-pi, pi)"""
    return (np.asarray(angle) + np.pi) % (2 * np.pi) - np.pi
