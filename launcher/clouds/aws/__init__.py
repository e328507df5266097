"""Amazon EC2: the provisioner, its error mapping, network/key/image helpers,
S3 storage and the catalog fetcher, one small module each.

boto3 is imported only inside this package, and only when AWS is used:
`launcher --help`, `launcher gpus` and dry runs never import it.
"""
