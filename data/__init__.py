"""refract.data"""
