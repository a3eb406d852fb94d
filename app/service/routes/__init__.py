"""The service's endpoints, one module per resource."""
