#!/bin/bash
{ head -n 1 /app/customers.csv; grep ',FR,' /app/customers.csv; } > /app/fr.csv
