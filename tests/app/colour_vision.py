"""Colour-vision simulation for tests: Machado, Oliveira & Fernandes (2009), "A physiologically-based model for
simulation of color vision deficiency", IEEE TVCG 15(6), the severity-1.0 matrices applied in linear sRGB; colour
difference by CIEDE2000 (Sharma, Wu & Dalal 2005, "The CIEDE2000 color-difference formula: implementation notes")."""

from __future__ import annotations

import numpy as np

MACHADO_2009 = {
    "deuteranopia": np.array([[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.011820, 0.042940, 0.968881]]),
    "protanopia": np.array([[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216], [-0.003882, -0.048116, 1.051998]]),
    "tritanopia": np.array([[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602], [0.004733, 0.691367, 0.303900]]),
}


def _linear(rgb: np.ndarray) -> np.ndarray:
    c = rgb / 255.0
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def _srgb(lin: np.ndarray) -> np.ndarray:
    lin = np.clip(lin, 0.0, 1.0)
    return np.where(lin <= 0.0031308, lin * 12.92, 1.055 * lin ** (1 / 2.4) - 0.055) * 255.0


def seen(hex_color: str, vision: str | None = None) -> np.ndarray:
    """The sRGB colour (0-255) a viewer with `vision` (None: typical) sees for `hex_color`."""
    rgb = np.array([int(hex_color.lstrip("#")[i:i + 2], 16) for i in (0, 2, 4)], dtype=float)
    return rgb if vision is None else _srgb(_linear(rgb) @ MACHADO_2009[vision].T)


def relative_luminance(hex_color: str) -> float:
    """WCAG 2's relative luminance of an sRGB colour (contrast = (L1 + 0.05) / (L2 + 0.05))."""
    return float(_linear(seen(hex_color)) @ [0.2126, 0.7152, 0.0722])


def _lab(rgb: np.ndarray) -> tuple[float, float, float]:
    lin = _linear(rgb)
    xyz = np.array([[0.4124564, 0.3575761, 0.1804375], [0.2126729, 0.7151522, 0.0721750],
                    [0.0193339, 0.1191920, 0.9503041]]) @ lin / np.array([0.95047, 1.0, 1.08883])  # (D65 white)
    f = np.where(xyz > 216 / 24389, np.cbrt(xyz), (24389 / 27 * xyz + 16) / 116)
    return 116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])


def delta_e_2000(rgb1: np.ndarray, rgb2: np.ndarray) -> float:
    """CIEDE2000 between two sRGB colours (0-255)."""
    return delta_e_2000_lab(_lab(rgb1), _lab(rgb2))


def delta_e_2000_lab(lab1: tuple[float, float, float], lab2: tuple[float, float, float]) -> float:
    (L1, a1, b1), (L2, a2, b2) = lab1, lab2
    c_bar = (np.hypot(a1, b1) + np.hypot(a2, b2)) / 2
    g = 0.5 * (1 - np.sqrt(c_bar**7 / (c_bar**7 + 25**7)))
    a1p, a2p = (1 + g) * a1, (1 + g) * a2
    c1p, c2p = np.hypot(a1p, b1), np.hypot(a2p, b2)
    h1p, h2p = np.degrees(np.arctan2(b1, a1p)) % 360, np.degrees(np.arctan2(b2, a2p)) % 360
    dh = 0.0 if c1p * c2p == 0 else (h2p - h1p) - 360 * ((h2p - h1p) > 180) + 360 * ((h2p - h1p) < -180)
    d_h = 2 * np.sqrt(c1p * c2p) * np.sin(np.radians(dh / 2))
    l_bar, cp_bar = (L1 + L2) / 2, (c1p + c2p) / 2
    if c1p * c2p == 0:
        h_bar = h1p + h2p
    elif abs(h1p - h2p) <= 180:
        h_bar = (h1p + h2p) / 2
    else:
        h_bar = (h1p + h2p + 360) / 2 if h1p + h2p < 360 else (h1p + h2p - 360) / 2
    t = (1 - 0.17 * np.cos(np.radians(h_bar - 30)) + 0.24 * np.cos(np.radians(2 * h_bar))
         + 0.32 * np.cos(np.radians(3 * h_bar + 6)) - 0.20 * np.cos(np.radians(4 * h_bar - 63)))
    s_l = 1 + 0.015 * (l_bar - 50) ** 2 / np.sqrt(20 + (l_bar - 50) ** 2)
    s_c, s_h = 1 + 0.045 * cp_bar, 1 + 0.015 * cp_bar * t
    r_t = -np.sin(np.radians(60 * np.exp(-(((h_bar - 275) / 25) ** 2)))) * 2 * np.sqrt(cp_bar**7 / (cp_bar**7 + 25**7))
    dl, dc = (L2 - L1) / s_l, (c2p - c1p) / s_c
    return float(np.sqrt(dl**2 + dc**2 + (d_h / s_h) ** 2 + r_t * dc * (d_h / s_h)))
