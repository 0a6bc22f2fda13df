#!/bin/sh
# Run by acpid for the ACPI power button (QMP system_powerdown).
echo "TESTGUEST POWEROFF" >/dev/console
sync
poweroff -f
