"""Access control: request signing (pure), the ACL file's model, and the enforcing interceptor."""
