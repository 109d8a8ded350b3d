"""Worker processes cap ONNX Runtime threads (see mage_gym/graph/onnx_threads.py)."""
from __future__ import annotations

import subprocess
import sys
import textwrap


def test_sessions_created_after_the_cap_use_one_thread():
    """Run in a child: the patch is process-wide and must not leak into the test process."""
    code = textwrap.dedent("""
        import pathlib, onnxruntime as ort, rapidocr_onnxruntime
        from mage_gym.graph.onnx_threads import cap_onnx_threads
        # a small real model that ships with RapidOCR (the text-direction classifier)
        data = str(next(pathlib.Path(rapidocr_onnxruntime.__file__).parent.glob("models/*cls*.onnx")))
        seen = []
        orig = ort.InferenceSession._create_inference_session
        def spy(self, *a, **k):
            seen.append(self._sess_options.intra_op_num_threads)
            return orig(self, *a, **k)
        ort.InferenceSession._create_inference_session = spy
        assert cap_onnx_threads(1)
        ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        explicit = ort.SessionOptions(); explicit.intra_op_num_threads = 3
        ort.InferenceSession(data, explicit, providers=["CPUExecutionProvider"])
        print(seen)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[1, 3]"
