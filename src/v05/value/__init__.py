"""Value probes fitted online on the policy's own features (numpy + scikit-learn; no torch).

:class:`~v05.value.probe.PoiseProbe` and :class:`~v05.value.probe.GroupBuffer` are POISE's probe and its FIFO buffer
(arXiv:2605.07579); :class:`~v05.value.probe.PcaRidgeHead` is the prompt-only variant behind the ``pca_ridge`` head.
"""

from v05.value.probe import GroupBuffer, PcaRidgeHead, PoiseProbe

__all__ = ["GroupBuffer", "PcaRidgeHead", "PoiseProbe"]
