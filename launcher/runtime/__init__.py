"""What runs on nodes: command runners (local, SSH), file sync, keys, the head-node agent.

Import submodules directly; nothing heavy (paramiko) is imported here.
"""
