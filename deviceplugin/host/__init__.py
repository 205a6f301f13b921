"""The host side: sysfs discovery, watchers, the CDI spec, the NFD file, the installed pinner, atomic writes."""
