"""Worker processes configure ONNX Runtime sessions (see mage_gym/graph/onnx_threads.py)."""
from __future__ import annotations

import subprocess
import sys
import textwrap


def test_sessions_created_after_the_cap_use_one_thread_and_the_arena():
    """Run in a child: the patch is process-wide and must not leak into the test process."""
    code = textwrap.dedent("""
        import pathlib, onnxruntime as ort, rapidocr_onnxruntime
        from mage_gym.graph.onnx_threads import cap_onnx_threads
        # a small real model that ships with RapidOCR (the text-direction classifier)
        data = str(next(pathlib.Path(rapidocr_onnxruntime.__file__).parent.glob("models/*cls*.onnx")))
        seen = []
        orig = ort.InferenceSession._create_inference_session
        def spy(self, *a, **k):
            seen.append((self._sess_options.intra_op_num_threads, self._sess_options.enable_cpu_mem_arena))
            return orig(self, *a, **k)
        ort.InferenceSession._create_inference_session = spy
        assert cap_onnx_threads(1)
        ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        no_arena = ort.SessionOptions(); no_arena.enable_cpu_mem_arena = False  # what pymupdf.layout passes
        ort.InferenceSession(data, no_arena, providers=["CPUExecutionProvider"])
        explicit = ort.SessionOptions(); explicit.intra_op_num_threads = 3; explicit.enable_cpu_mem_arena = False
        ort.InferenceSession(data, explicit, providers=["CPUExecutionProvider"])
        print(seen)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[(1, True), (1, True), (3, False)]"
